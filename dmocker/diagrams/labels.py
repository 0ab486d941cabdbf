"""Label text shared by the views: merging causes into ``a | b [guard] / actions`` and wrapping.

All views speak one notation, ``event [guard] / emitted actions``, so a reader learns it once.
Merging is by exact text, and the result is sorted or kept in a caller-given order, never in
set or hash order.
"""

from __future__ import annotations

#: Labels are wrapped at about this many characters so arrows stay narrow.
WRAP = 60


def compact_events(events: list[str]) -> list[str]:
    """``A.Failed | B.Failed`` becomes ``(A | B).Failed``; other events stay as they are.

    Order of first appearance is kept, so the caller decides the order (spec order).
    """
    by_key: dict[str, list[str]] = {}
    order: list[str] = []
    for event in events:
        head, dot, kind = event.rpartition(".")
        key = "." + kind if dot else event
        if key not in by_key:
            order.append(key)
            by_key[key] = []
        by_key[key].append(head if dot else "")
    out: list[str] = []
    for key in order:
        heads = by_key[key]
        if len(heads) > 1 and all(heads):
            out.append(f"({' | '.join(heads)}){key}")
        else:
            out.extend(f"{h}{key}" if h else key for h in heads)
    return out


def join_events(events: list[str], guard: tuple[str, ...] = (), emits: tuple[str, ...] = ()) -> str:
    """One label line: ``e1 | e2 [g1, g2] / A, B`` (parts omitted when empty)."""
    text = " | ".join(compact_events(events))
    if guard:
        text = f"{text} [{', '.join(guard)}]".strip()
    if emits:
        text = f"{text} / {', '.join(emits)}".strip()
    return text


def merge_lines(lines: list[str]) -> list[str]:
    """Merge ``event / actions`` lines that emit the same actions into one line per action list.

    Groups appear in order of first appearance; events keep their order within a group and
    appear once.
    """
    groups: dict[str, list[str]] = {}
    for line in lines:
        event, sep, emits = line.partition(" / ")
        events = groups.setdefault(emits if sep else "", [])
        if event not in events:
            events.append(event)
    out: list[str] = []
    for emits, events in groups.items():
        out.append(join_events(events, (), tuple(emits.split(", ")) if emits else ()))
    return out


def wrap(text: str, width: int = WRAP) -> list[str]:
    """Greedy word wrap on spaces; continuation lines are indented two spaces."""
    lines: list[str] = []
    current = ""
    for word in text.split(" "):
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = "  " + word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return lines
