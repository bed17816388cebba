"""Which of llama.cpp's settings won on this machine, remembered between runs (issue 44).

llama_best.py and llama_agents_best.py measure a grid of settings (weight conversions, flash
attention, unified KV) to report llama.cpp at its best. The grid is what makes
scripts/bench_table.sh slow, and its winner does not change between runs on one machine. The first
run measures the whole grid and stores each row's winner here. Later runs measure only the winners.
`--regrid` (or CHORUS_PEER_REGRID=1, for callers such as `chorus bench`) measures the grid again.

A winner is keyed by everything that could change it: the CPU (model name and instruction-set
flags), the peer build (its bin/ directory), the model file (name, size, a hash of its first MiB),
the script and the row's own parameters (threads, test, lengths, depth, KV type, the grid it was
chosen from). The store is one JSON file, .cache/peer/winners.json (CHORUS_PEER_DIR moves it),
written whole to a temporary file and renamed, so an interrupted run never leaves half a file.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def store_path() -> str:
    return os.path.join(os.environ.get("CHORUS_PEER_DIR", os.path.join(ROOT, ".cache", "peer")), "winners.json")


def regrid_requested(flag: bool) -> bool:
    return flag or os.environ.get("CHORUS_PEER_REGRID", "") not in ("", "0", "off")


def machine_key(bin_dir: str) -> str:
    """The CPU's model name and a hash of its flags, and the peer build in use."""
    model, flags = "unknown CPU", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k == "model name" and model == "unknown CPU":
                    model = v.strip()
                elif k in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(v.split()))
    except OSError:
        pass
    h = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"{model} [flags {h}] {os.path.basename(os.path.dirname(os.path.abspath(bin_dir)))}"


def model_key(path: str) -> str:
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()[:16]
    return f"{os.path.basename(path)} {os.path.getsize(path)} {head}"


class Winners:
    """The stored winners of one script on one machine and model."""

    def __init__(self, script: str, bin_dir: str, model: str):
        self.prefix = f"{script} | {machine_key(bin_dir)} | {model_key(model)}"
        self.path = store_path()
        try:
            with open(self.path) as f:
                self.data = json.load(f)
            if not isinstance(self.data, dict):
                raise ValueError("not an object")
        except FileNotFoundError:
            self.data = {}
        except (OSError, ValueError) as e:  # a damaged store is measured again, not trusted
            print(f"{script}: ignoring {self.path} ({e}): the grid will be measured again", file=sys.stderr)
            self.data = {}

    def key(self, row: str) -> str:
        return f"{self.prefix} | {row}"

    def get(self, row: str) -> dict | None:
        v = self.data.get(self.key(row))
        return v if isinstance(v, dict) and "settings" in v else None

    def put(self, row: str, settings: dict, median: float) -> None:
        self.data[self.key(row)] = {"settings": settings, "median": median,
                                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}

    def save(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)
