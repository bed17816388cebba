#!/usr/bin/env python3
"""The public API is the only door: checks the include lines of two layers.

  include_rules_test.py public CXX   every include/chorus/*.h includes only C++ standard headers and
                                     other include/chorus headers, and compiles alone with CXX and
                                     `-I include` (no fmt, no src/: an installed copy needs nothing else)
  include_rules_test.py server       every file of src/server includes only chorus/* (include/chorus),
                                     its own folder's files and system or third-party <headers>,
                                     never a header of src/ below it (engine/, kv/, util/, ...)
  include_rules_test.py tools        every file of tools/ includes only chorus/*, eval/* (the evaluation
                                     library), tools/* and system or third-party <headers>; the includes
                                     of src/ internals allowed are listed in TOOLS_EXCEPTIONS (none now), and
                                     the test fails on one not listed and on a listed one that is gone, so
                                     the list can only shrink

Run from the repository root (ctest does). Exit 1 with one line per offending include.
"""
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)

# The C++20 standard library (headers a conforming implementation provides, C compatibility ones included).
STD = set("""
algorithm any array atomic barrier bit bitset charconv chrono codecvt compare complex concepts condition_variable
coroutine deque exception execution expected filesystem format forward_list fstream functional future
initializer_list iomanip ios iosfwd iostream istream iterator latch limits list locale map memory memory_resource
mutex new numbers numeric optional ostream queue random ranges ratio regex scoped_allocator semaphore set
shared_mutex source_location span sstream stack stdexcept stop_token streambuf string string_view syncstream
system_error thread tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant
vector version cassert cctype cerrno cfenv cfloat cinttypes climits clocale cmath csetjmp csignal cstdarg cstddef
cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype
""".split())


def includes(path):
    return INCLUDE.findall(path.read_text(encoding="utf-8"))


def check_public(cxx):
    errors = []
    headers = sorted((ROOT / "include" / "chorus").glob("*.h"))
    if not headers:
        return ["no headers in include/chorus"]
    for h in headers:
        rel = h.relative_to(ROOT)
        for kind, name in includes(h):
            if kind == "<" and name not in STD:
                errors.append(f"{rel}: #include <{name}> is not a C++ standard header (the public API uses the "
                              f"standard library and include/chorus only)")
            if kind == '"' and not (name.startswith("chorus/") and (ROOT / "include" / name).is_file()):
                errors.append(f'{rel}: #include "{name}" is not a header of include/chorus')
    with tempfile.TemporaryDirectory() as tmp:
        for h in headers:
            name = h.relative_to(ROOT / "include")
            src = pathlib.Path(tmp) / "alone.cc"
            src.write_text(f'#include "{name}"\n#include "{name}"\nint main() {{ return 0; }}\n')
            cmd = [cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "include"),
                   str(src)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                lines = r.stderr.strip().splitlines()
                first = next((l for l in lines if "error" in l), lines[0] if lines else "(no output)")
                errors.append(f"include/{name} does not compile alone with -I include: {first}")
    return errors


def check_server():
    errors = []
    server = ROOT / "src" / "server"
    layers = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()} - {"server"}
    files = sorted(p for p in server.iterdir() if p.suffix in (".h", ".cc", ".inc"))
    for f in files:
        rel = f.relative_to(ROOT)
        for kind, name in includes(f):
            first = name.split("/")[0]
            if ".." in name.split("/"):
                errors.append(f"{rel}: #include {kind}{name} climbs out of the folder")
            elif kind == '"':
                ok = ((name.startswith("chorus/") and (ROOT / "include" / name).is_file()) or
                      ("/" not in name and (server / name).is_file()) or
                      name == "server/dashboard_assets.h")  # generated from assets/ (CMakeLists.txt)
                if not ok:
                    errors.append(f'{rel}: #include "{name}" is neither include/chorus/* nor a file of src/server')
            elif first in layers:
                errors.append(f"{rel}: #include <{name}> reaches src/{first} (use include/chorus)")
    if not files:
        errors.append("no files in src/server")
    return errors


# (file, include) pairs of tools/ allowed to reach below the public API and the eval library. None remain
# (issue 43 step 2: the last three went through chorus/model_info.h, chorus/embedder.h, chorus/server.h);
# an entry whose include is gone fails the test, so the list only shrinks.
TOOLS_EXCEPTIONS = set()


def check_tools():
    errors = []
    tools = ROOT / "tools"
    layers = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()} - {"eval"}
    files = sorted(p for p in tools.iterdir() if p.suffix in (".h", ".cc", ".inc"))
    seen = set()
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        for kind, name in includes(f):
            first = name.split("/")[0]
            if ".." in name.split("/"):
                errors.append(f"{rel}: #include {kind}{name} climbs out of the folder")
                continue
            if (rel, name) in TOOLS_EXCEPTIONS:
                seen.add((rel, name))
                continue
            if kind == '"':
                ok = ((name.startswith("chorus/") and (ROOT / "include" / name).is_file()) or
                      (first in ("eval", "tools") and (ROOT / ("src" if first == "eval" else "") / name).is_file()))
                if not ok:
                    errors.append(f'{rel}: #include "{name}" is neither chorus/*, eval/* nor tools/*')
            elif first in layers:
                errors.append(f"{rel}: #include <{name}> reaches src/{first} (use include/chorus or eval/)")
    for rel, name in sorted(TOOLS_EXCEPTIONS - seen):
        errors.append(f"{rel}: no longer includes {name}: remove it from TOOLS_EXCEPTIONS")
    if not files:
        errors.append("no files in tools")
    return errors


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "public" and len(sys.argv) == 3:
        errors = check_public(sys.argv[2])
    elif sys.argv[1:] == ["server"]:
        errors = check_server()
    elif sys.argv[1:] == ["tools"]:
        errors = check_tools()
    else:
        print("usage: include_rules_test.py public CXX | server | tools", file=sys.stderr)
        return 2
    for e in errors:
        print(e)
    print(f"{sys.argv[1]}: {'FAILED, ' + str(len(errors)) + ' problem(s)' if errors else 'ok'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
