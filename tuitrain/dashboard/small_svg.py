"""A screenshot's SVG (Rich's `export_svg`, what Textual's `export_screenshot` writes) made about three
times smaller, drawn the same: the notebook keeps one in each cell that trained (issue 51: 140-220 KB each
before), and the README shows one.

What goes: the run's unique prefix repeated in every class and clip (`terminal-2396702573-`), one clip
reference a piece of text (one a line now, on a group), the background's cell-by-cell rectangles (runs of
one colour merge; the commonest colour is one rectangle under the rest), neighbouring texts of one style
(merged: one `<text>`, its `textLength` the sum, so each cell keeps its place), the spaces' `&#160;`
(the character itself) and the line ends' empty texts. An SVG not in Rich's shape is returned unchanged.
Pure text in, text out: imports nothing of tuitrain.
"""

from __future__ import annotations

import re
from collections import defaultdict

_ID = re.compile(r"\.([A-Za-z][\w-]*?)-matrix \{")
_RECT = re.compile(
    r'<rect fill="(#[0-9a-fA-F]+)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" '
    r'shape-rendering="crispEdges"/>'
)
_TEXT = re.compile(
    r'<text class="([\w-]+)" x="([\d.]+)" y="([\d.]+)" textLength="([\d.]+)" '
    r'clip-path="url\(#[\w-]+-line-(\d+)\)">(.*?)</text>',
    re.S,
)
_CLIP = re.compile(r'<clipPath id="([\w-]+)-line-(\d+)">\s*(<rect [^>]*/>)\s*</clipPath>')
_NEAR = 0.01  # pixels: x positions are sums of float cell widths


def _num(value: float) -> str:
    return format(round(value, 2), "g")


def smaller(svg: str) -> str:
    """`svg`, smaller and drawn the same; unchanged when it is not a Rich terminal SVG."""
    found = _ID.search(svg)
    if found is None:
        return svg
    uid = found.group(1)
    start = svg.rfind("<g ", 0, svg.find(f'clip-path="url(#{uid}-clip-terminal)">'))
    if start < 0 or f'<g class="{uid}-matrix">' not in svg[start:]:
        return svg
    short = "t" + re.sub(r"\D", "", uid)[-5:]  # still one of its own where several share a page
    head, body = svg[:start], svg[start:]
    backgrounds_end = body.find(f'<g class="{uid}-matrix">')
    rects = [
        (m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4)), m.group(5))
        for m in _RECT.finditer(body, 0, backgrounds_end)
    ]
    texts = [
        (m.group(1), float(m.group(2)), m.group(3), float(m.group(4)), int(m.group(5)), m.group(6))
        for m in _TEXT.finditer(body, backgrounds_end)
    ]
    if not texts:
        return svg
    opening = body[: body.find(">") + 1]  # <g transform="translate(9, 41)" clip-path="url(#...-clip-terminal)">

    head = _CLIP.sub(lambda m: f'<clipPath id="{short}-l{m.group(2)}">{m.group(3)}</clipPath>', head)
    head = re.sub(r"\n\s*\n", "\n", head)
    out = [head.replace(uid + "-", short + "-").rstrip(), "\n", opening.replace(uid + "-", short + "-"), "\n"]
    out.append(_backgrounds(rects))
    out.append(f'<g class="{short}-matrix">')
    by_line: dict[int, list] = defaultdict(list)
    for text in texts:
        by_line[text[4]].append(text)
    for line, pieces in by_line.items():
        out.append(f'<g clip-path="url(#{short}-l{line})">')
        out.extend(_merged_texts(pieces, uid, short))
        out.append("</g>\n")
    out.append("</g>\n</g>\n</svg>\n")
    return "".join(out)


def _backgrounds(rects: list) -> str:
    """The cells' backgrounds: runs of one colour in a row as one rectangle; the commonest colour, when the
    rows are covered wall to wall, as one rectangle under all (its runs left out)."""
    rows: dict[float, list] = defaultdict(list)
    for fill, x, y, width, height in rects:
        row = rows[y]
        if row and row[-1][0] == fill and abs(row[-1][1] + row[-1][3] - x) < _NEAR:
            row[-1] = (fill, row[-1][1], y, x + width - row[-1][1], height)
        else:
            row.append((fill, x, y, width, height))
    area: dict[str, float] = defaultdict(float)
    for row in rows.values():
        for fill, _x, _y, width, _h in row:
            area[fill] += width
    ends = {_row_end(row) for row in rows.values()}
    covered = bool(rows) and None not in ends and max(ends) - min(ends) < _NEAR
    under = max(area, key=area.get) if covered else None
    parts = ['<g shape-rendering="crispEdges">']
    if under is not None:
        ys = sorted(rows)
        last = rows[ys[-1]][0]
        height = ys[-1] + float(last[4]) - ys[0]
        parts.append(
            f'<rect fill="{under}" x="0" y="{_num(ys[0])}" width="{_num(max(ends))}" height="{_num(height)}"/>'
        )
    for row in rows.values():
        for fill, x, y, width, height in row:
            if fill != under:
                parts.append(
                    f'<rect fill="{fill}" x="{_num(x)}" y="{_num(y)}" width="{_num(width)}" height="{height}"/>'
                )
    parts.append("</g>\n")
    return "".join(parts)


def _row_end(row: list) -> float | None:
    """Where a row's backgrounds end when they cover it from the left edge without a gap; else None."""
    end = 0.0
    for _fill, x, _y, width, _h in row:
        if abs(x - end) >= _NEAR:
            return None
        end = x + width
    return end


def _merged_texts(pieces: list, uid: str, short: str) -> list[str]:
    merged: list[list] = []
    for cls, x, y, length, _line, content in pieces:
        if not content.replace("&#160;", " ").strip(" \n"):
            continue  # a line's end, or spaces over a background already drawn
        content = content.replace("&#160;", "\u00a0")
        last = merged[-1] if merged else None
        if last is not None and last[0] == cls and abs(last[1] + last[3] - x) < _NEAR:
            last[3] += length
            last[4] += content
        else:
            merged.append([cls, x, y, length, content])
    return [
        f'<text class="{cls.replace(uid + "-", short + "-")}" x="{_num(x)}" y="{y}" '
        f'textLength="{_num(length)}">{content}</text>'
        for cls, x, y, length, content in merged
    ]


__all__ = ["smaller"]
