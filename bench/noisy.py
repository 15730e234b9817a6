"""The long form of the noisy-neighbour suite: every case, both brokers, interleaved rounds.

    python bench/noisy.py --rounds 3                       # all cases, hutch-broker and RabbitMQ
    python bench/noisy.py --rounds 1 --cases case1-policy --brokers hutch
    python bench/noisy.py --hutch-source /tmp/base/broker  # another commit's broker (git archive)

Why: the CI form (tests/noisy) answers yes or no against a loose bound on a busy machine; this
one measures how far each broker is from the target (a canary max round trip of about 50 ms)
and how much the attacker itself pays, with RabbitMQ 3.10.8 as the reference. Each round runs
every case on a fresh broker of each kind, the broker order alternating from round to round
(bench/rounds.py), and the figures are medians with their range. It writes
docs/isolation/figures.md (the table) and a JSON file with every sample under bench/results/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import rounds
from hutch_testing import noisy, noisy_cases
from hutch_testing import rabbitmq as reference

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "docs" / "isolation" / "figures.md"
TARGET = noisy.CanaryBound(max_ms=50.0, p99_ms=50.0)  # the target on a quiet machine


class LimitedRabbitMQ(reference.RabbitMQ):
    """RabbitMQ started under RLIMIT_NOFILE 1,024: it sizes its file-handle budget at boot, so
    a limit applied to the running node (as for hutch-broker) would not be seen by it."""

    def _command(self) -> list[str]:
        limit = noisy_cases.BROKER_FD_LIMIT
        return ["prlimit", f"--nofile={limit}:{limit}", *super()._command()]


def start(kind: str, case: noisy_cases.Case, work: Path, source: Path | None) -> Any:
    if kind == "hutch":
        return noisy_cases.start_hutch(work, case.hutch_config, source)
    launcher = LimitedRabbitMQ if case is noisy_cases.SLOW_HTTP else reference.RabbitMQ
    node = launcher(work_dir=work).start()
    if case.rabbitmq_watermark_bytes:
        node.rabbitmqctl("set_vm_memory_high_watermark", "absolute",
                         str(case.rabbitmq_watermark_bytes))  # fmt: skip
    return node


def run_one(kind: str, case: noisy_cases.Case, source: Path | None) -> dict[str, Any]:
    load = rounds.load()
    with tempfile.TemporaryDirectory(prefix=f"noisy-{kind}-") as work:
        try:
            broker = start(kind, case, Path(work) / "broker", source)
        except Exception as error:  # noqa: BLE001 - a broker that fails is a cell, not the end
            return {"case": case.name, "broker": kind, "error": repr(error), "load": load}
        try:
            result = noisy_cases.run_case(broker, case)
        except Exception:  # noqa: BLE001
            return {"case": case.name, "broker": kind, "error": traceback.format_exc(),
                    "load": load}  # fmt: skip
        finally:
            broker.stop()
    print(result.summary(), flush=True)
    return asdict(result) | {"load": load}


def cell(samples: list[dict[str, Any]], key: str, digits: int = 0) -> str:
    values = [s["canary"][key] for s in samples if "canary" in s]
    return rounds.summarize(values).text(digits=digits) if values else "FAILED"


def attacker(samples: list[dict[str, Any]]) -> str:
    values = [s["attacker_s"] for s in samples if "attacker_s" in s]
    return rounds.summarize(values).text(" s", digits=2) if values else "FAILED"


def verdict(samples: list[dict[str, Any]]) -> str:
    done = [s for s in samples if "canary" in s]
    if not done:
        return "FAILED"
    ci = sum(1 for s in done if not s["problems"])
    target = sum(
        1 for s in done
        if not noisy.CanaryReport(**s["canary"]).violations(TARGET) and not s["problems"]
    )  # fmt: skip
    return f"{ci}/{len(done)} CI, {target}/{len(done)} target"


def table(cases: list[noisy_cases.Case], kinds: list[str], samples: list[dict[str, Any]]) -> str:
    lines = [
        "| case | broker | canary max ms | canary p99 ms | misses | attacker | "
        "passes (CI bound / 50 ms target) | last round's facts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        for kind in kinds:
            mine = [s for s in samples if s["case"] == case.name and s["broker"] == kind]
            facts = next((s["facts"] for s in reversed(mine) if "facts" in s), {})
            shown = "; ".join(f"{key} {value}" for key, value in facts.items()) or (
                mine[-1].get("error", "").splitlines()[-1][:80] if mine else ""
            )
            lines.append(
                f"| {case.name} | {kind} | {cell(mine, 'max_ms')} | {cell(mine, 'p99_ms')} | "
                f"{cell(mine, 'misses')} | {attacker(mine)} | {verdict(mine)} | {shown} |"
            )
    return "\n".join(lines)


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def write_figures(args: argparse.Namespace, samples: list[dict[str, Any]]) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    source = f"this tree at commit {commit()} (with any uncommitted changes)"
    if args.hutch_source:
        source = f"another source tree ({args.note or args.hutch_source})"
    if args.merge:
        source += "; the cells of other hutch-broker labels come from an earlier run"
    cases = [case for case in noisy_cases.CASES if any(s["case"] == case.name for s in samples)]
    kinds = sorted({str(s["broker"]) for s in samples})  # hutch, then rabbitmq
    titles = "\n".join(f"- `{case.name}`: {case.title}" for case in cases)
    bound = noisy.CI_BOUND
    text = f"""# Noisy-neighbour figures

Written by `bench/noisy.py` on {when}.

- hutch-broker: {source};
- RabbitMQ {reference.EXPECTED_VERSION} beside it, same machine, same cases;
- rounds: {max(s.get("round", 0) for s in samples) + 1}, on {os.cpu_count()} CPUs shared with
  other work (read the ranges): {rounds.busiest(samples)}.

See [noisy-neighbours.md](noisy-neighbours.md) for what each case does and what the bounds mean.
Each cell is the median over the rounds with its range. The canary figures are the victim
tenant's round trips (publish with confirms, then delivery; one every 20 ms). "attacker" is the
time the attacking tenant's own work took. "passes" counts rounds within the CI bound (max
{bound.max_ms:.0f} ms, p99 {bound.p99_ms:.0f} ms, no miss, and the case's own check) and within
the target (max and p99 {TARGET.max_ms:.0f} ms).

{titles}

{table(cases, kinds, samples)}
"""
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"figures: {args.output}")


def label(args: argparse.Namespace, kind: str) -> str:
    """The broker column: ``--hutch-label`` tells two hutch-broker source trees apart."""
    return args.hutch_label if kind == "hutch" else kind


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    names = [case.name for case in noisy_cases.CASES]
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(names), help="comma-separated case names")
    parser.add_argument("--brokers", default="hutch,rabbitmq", type=lambda v: v.split(","))
    parser.add_argument("--hutch-source", type=Path, help="a broker/ folder to run hutch from")
    parser.add_argument("--note", default="", help="what --hutch-source is, for figures.md")
    parser.add_argument("--hutch-label", default="hutch", help="its name in the broker column")
    parser.add_argument("--output", type=Path, default=FIGURES)
    parser.add_argument("--json", type=Path, help="default bench/results/noisy-<stamp>.json")
    parser.add_argument("--merge", type=Path, help="an earlier JSON: re-measure only these cells")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the brokers' teardown
    chosen = args.cases.split(",")
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {names}")
    cases = [case for case in noisy_cases.CASES if case.name in chosen]
    if "rabbitmq" in args.brokers and not reference.installed():
        parser.error(
            "RabbitMQ is not installed (scripts/install-rabbitmq.sh), or pass --brokers hutch"
        )
    samples: list[dict[str, Any]] = []
    if args.merge:  # keep an earlier run's samples of the cells not measured again
        redone = {(case.name, label(args, kind)) for case in cases for kind in args.brokers}
        earlier = json.loads(args.merge.read_text())["samples"]
        samples = [s for s in earlier if (s["case"], s["broker"]) not in redone]
    for index, order in enumerate(rounds.orders(args.brokers, args.rounds)):
        print(f"--- round {index + 1}/{args.rounds}: {' then '.join(order)} ---", flush=True)
        for case in cases:
            for kind in order:
                sample = run_one(kind, case, args.hutch_source) | {"round": index}
                samples.append(sample | {"broker": label(args, kind)})
    rounds.write_results({"samples": samples, "rounds": args.rounds}, args.json, "noisy")
    write_figures(args, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
