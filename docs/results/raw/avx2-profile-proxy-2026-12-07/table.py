#!/usr/bin/env python3
"""Top symbols of each perf profile (the last 25 % of samples: the decode phase), names shortened."""
import re, subprocess, sys, os
FMT=['f16','q8','kivi4','kivi3','kivi2','tq4','tq3','tq2','polykv-paper']
def short(sym):
    m0 = re.search(r'(ScoreBlock|AccumulateBlock)<\(chorus::KvFormat\)(\d+)>', sym)
    if m0: return f'{m0.group(1)}<{FMT[int(m0.group(2))]}>'
    sym = re.sub(r'\(.*', '', sym) if 'lambda' not in sym else sym
    m = re.match(r'chorus::N_AVX2::(?:mm::)?(?:maddubs::)?([A-Za-z0-9_]+)(<[^>(]*>)?', sym)
    if m:
        name = m.group(1) + (m.group(2) or '')
        if 'DecodedCols' in sym: name += ' (decoded cols)'
        if 'DecodedRows' in sym: name += ' (decoded rows)'
        return name
    return re.sub(r'\(.*', '', sym)[:60]
for f in sys.argv[1:]:
    out = subprocess.run(['perf', 'report', '-i', f, '--sort', 'symbol', '--no-children', '--time', '75%-100%',
                          '--stdio'], capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r'\s+([\d.]+)%\s+\[(.)\]\s+(.*?)\s{2,}', line + '  ')
        if not m: continue
        k = short(m.group(3).strip())
        rows[k] = rows.get(k, 0) + float(m.group(1))
    print(f"### {os.path.basename(f)}")
    for k, v in sorted(rows.items(), key=lambda x: -x[1])[:12]:
        print(f"| {k} | {v:.1f} % |")
    print()
