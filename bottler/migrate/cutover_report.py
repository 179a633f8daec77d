"""The cutover's report, as JSON (for machines and archives) and Markdown (for people): the
preconditions, the fence, per table rows, checksum and time, the sequences set, the objects
created, the write-downtime window and the verdict."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bottler.migrate.cutover import Cutover
from common.redact import redact


def _when(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def as_dict(c: Cutover) -> dict:
    o = c.options
    d = c.definitions
    return {
        "verdict": c.verdict,
        "reasons": c.reasons,
        "source": redact(o.source),
        "target": redact(o.target),
        "started": _when(c.started),
        "preconditions": [{"ok": ch.ok, "check": ch.what} for ch in c.preconditions],
        "fence": {
            "lsn": c.fence_lsn or None,
            "at": _when(c.fence_at),
            "writes_stopped_at": _when(c.writes_stopped_at),
            "positions": {t: {str(p): n for p, n in ps.items()} for t, ps in c.positions.items()},
            "roles_fenced": c.roles_fenced,
            "sessions_ended": c.sessions_ended,
            "roles_restored": c.roles_restored,
        },
        "tables": [] if c.verify is None else [{
            "table": t.qualified, "identical": t.identical,
            "source_rows": t.source_rows, "target_rows": t.target_rows,
            "source_checksum": t.source_checksum, "target_checksum": t.target_checksum,
            "differences": [{"kind": x.kind, "key": x.key} for x in t.differences],
            "difference_counts": dict(t.difference_counts), "problems": t.problems,
            "seconds": round(t.seconds, 3),
        } for t in c.verify.tables],
        "sequences": [] if d is None else [{
            "sequence": s.name, "value": s.value, "is_called": s.is_called,
            "source_value": s.source_value, "created": s.created or None,
        } for s in d.sequences],
        "objects": ([] if d is None else [{"object": w, "outcome": "created"}
                                          for w in d.created])
        + ([] if c.postdata is None else [{
            "object": e.label, "outcome": e.outcome, "error": e.error or None,
            "seconds": round(e.seconds, 3)} for e in c.postdata.entries]),
        "notes": [] if d is None else d.notes,
        "steps": [{"step": s, "seconds": round(t, 3)} for s, t in c.steps],
        "downtime_seconds": None if c.downtime is None else round(c.downtime, 3),
        "verdict_at": _when(c.verdict_at),
    }


def as_markdown(c: Cutover) -> str:
    r = as_dict(c)
    lines = [f"# Cutover: {r['verdict']}", ""]
    lines += [f"- source: `{r['source']}`", f"- target: `{r['target']}`",
              f"- started: {r['started']}"]
    if r["downtime_seconds"] is not None:
        lines.append(f"- write downtime (fence to go): {r['downtime_seconds']:.1f} s")
    lines += [f"- reason: {reason}" for reason in r["reasons"]]
    lines += ["", "## Preconditions", ""]
    lines += [f"- {'✓' if p['ok'] else '✗'} {p['check']}" for p in r["preconditions"]]
    f = r["fence"]
    if f["lsn"]:
        lines += ["", "## Fence", "", f"- written at WAL position `{f['lsn']}`, {f['at']}"]
        if f["roles_fenced"]:
            lines.append(f"- roles fenced out: {', '.join(f['roles_fenced'])} "
                         f"({f['sessions_ended']} sessions ended); "
                         + ("connection limits restored" if f["roles_restored"] else
                            "still fenced out of the source (undo: `ALTER ROLE … CONNECTION "
                            "LIMIT -1`)"))
        lines.append(f"- {sum(len(p) for p in f['positions'].values())} topic partitions, "
                     "every one applied by the replica up to its end offset at the fence")
    if r["tables"]:
        lines += ["", "## Tables", "", "| | table | source rows | target rows | checksum | "
                  "differences | time |", "|---|---|--:|--:|---|---|--:|"]
        for t in r["tables"]:
            diffs = "; ".join([*t["problems"], *(f"{x['kind']}: {x['key']}"
                                                 for x in t["differences"])]) or "identical"
            checksum = t["source_checksum"][:12] + (
                "" if t["source_checksum"] == t["target_checksum"]
                else f" / {t['target_checksum'][:12]}")
            lines.append(f"| {'✓' if t['identical'] else '✗'} | {t['table']} | "
                         f"{t['source_rows']:,} | "
                         f"{'-' if t['target_rows'] is None else format(t['target_rows'], ',')}"
                         f" | `{checksum}` | {diffs} | {t['seconds']:.2f}s |")
    if r["sequences"]:
        lines += ["", "## Sequences set", "", "| sequence | source | set to | created |",
                  "|---|--:|--:|---|"]
        for s in r["sequences"]:
            used = "unused" if s["source_value"] is None else s["source_value"]
            lines.append(f"| {s['sequence']} | {used} | {s['value']} | {s['created'] or ''} |")
    if r["objects"]:
        lines += ["", "## Objects", "", "| object | outcome | time |", "|---|---|--:|"]
        lines += [f"| {x['object']} | {x['outcome']}"
                  + (f": {x['error']}" if x.get("error") else "")
                  + f" | {x['seconds']:.2f}s |" if "seconds" in x else
                  f"| {x['object']} | {x['outcome']} | |" for x in r["objects"]]
    if r["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r["notes"]]
    lines += ["", "## Steps", "", "| step | time |", "|---|--:|"]
    lines += [f"| {s['step']} | {s['seconds']:.2f}s |" for s in r["steps"]]
    return "\n".join(lines) + "\n"


def write(c: Cutover, path: Path) -> tuple[Path, Path]:
    """The Markdown report at ``path`` and the JSON one beside it (``.json``)."""
    markdown = path if path.suffix != ".json" else path.with_suffix(".md")
    data = markdown.with_suffix(".json")
    markdown.write_text(as_markdown(c))
    data.write_text(json.dumps(as_dict(c), indent=2) + "\n")
    return markdown, data
