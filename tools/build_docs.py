#!/usr/bin/env python3
"""Build the documentation: check every relative link, then write one HTML page.

    python tools/build_docs.py            # check links, write docs/_build/index.html
    python tools/build_docs.py --check    # check links only
    python tools/build_docs.py --out DIR  # write DIR/index.html instead

The docs are plain Markdown (README.md and docs/**/*.md, read as they are on GitHub).  This script
needs only the Python standard library.  It checks that every relative link and image in those
files, and in the READMEs of tools/ and benchmarks/, points to an existing file, and that every
``#anchor`` names a heading of its target page (GitHub's heading ids).  Then it converts the user
pages (README.md and docs/, without the developer pages under docs/dev/) with a small Markdown
subset (headings, paragraphs, lists, tables, fenced code, inline code, links, bold; one-line HTML
comments are dropped) into one self-contained ``index.html``, with links between pages rewritten
to in-page anchors.  Exit status: 0 when every link resolves, 1 otherwise (the broken links are
listed; nothing is written).
"""
from __future__ import annotations

import argparse
import html
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD_DIR = "docs/_build"
#: Developer pages: link-checked, not part of the one-page user documentation.
DEV_DIR = "docs/dev"
#: Other Markdown files that are link-checked only (globs from the repository root).
CHECKED_ONLY = ("tools/*.md", "benchmarks/**/*.md")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")

_LINK = re.compile(r"!?\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<target><[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)"
                   r"(?:\s+\"[^\"]*\")?\)")
_REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(?P<target>\S+)")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<title>.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def doc_files(root: Path) -> list[Path]:
    """README.md and every Markdown file under docs/ (not the build output), in a stable order."""
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    docs = root / "docs"
    if docs.is_dir():
        files += sorted(p for p in docs.rglob("*.md") if BUILD_DIR not in p.relative_to(root).as_posix())
    return files


def checked_files(root: Path) -> list[Path]:
    """Every Markdown file whose links are checked: :func:`doc_files` and the tools' and
    benchmarks' READMEs."""
    extra = sorted({p for g in CHECKED_ONLY for p in root.glob(g) if p.is_file()})
    return doc_files(root) + extra


def user_pages(root: Path) -> list[Path]:
    """The pages of the one-page HTML: :func:`doc_files` without the developer pages."""
    return [p for p in doc_files(root) if not p.relative_to(root).as_posix().startswith(DEV_DIR + "/")]


def _strip_code(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks, with inline code blanked out."""
    out, fence = [], None
    for n, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            out.append((n, re.sub(r"`+[^`]*`+", lambda c: " " * len(c.group(0)), line)))
    return out


def slugify(title: str) -> str:
    """GitHub's heading id: link text kept, markup dropped, lower case, spaces to hyphens."""
    title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    title = title.replace("`", "").replace("*", "").strip().lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Heading ids of a Markdown file (duplicates get -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    ids = set()
    for _, line in _strip_code(path.read_text(encoding="utf-8").splitlines()):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slugify(m.group("title"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return ids


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every inline link, image and reference definition outside code."""
    out = []
    for n, line in _strip_code(path.read_text(encoding="utf-8").splitlines()):
        m = _REFDEF.match(line)
        if m:
            out.append((n, m.group("target")))
            continue
        for m in _LINK.finditer(line):
            out.append((n, m.group("target").strip("<>")))
    return out


def check_links(root: Path) -> list[str]:
    """Every broken relative link of README.md, docs/**/*.md and the tools' and benchmarks'
    READMEs, as 'file:line: message' strings."""
    root = Path(root)
    errors = []
    cache: dict[Path, set[str]] = {}
    for f in checked_files(root):
        rel = f.relative_to(root).as_posix()
        for line, target in links(f):
            if not target or _SCHEME.match(target) or target.startswith("//"):
                continue  # absolute URLs (http:, https:, mailto:) are not checked
            path_part, _, frag = target.partition("#")
            dest = (f.parent / path_part).resolve() if path_part else f
            if path_part and not dest.exists():
                errors.append(f"{rel}:{line}: link to {target}: {path_part} does not exist")
                continue
            if frag and dest.suffix == ".md" and dest.is_file():
                ids = cache.setdefault(dest, anchors(dest))
                if frag.lower() not in ids:
                    errors.append(f"{rel}:{line}: link to {target}: no heading #{frag} in {dest.name}")
    return errors


# ------------------------------------------------------------------------------ Markdown -> HTML
def _page_id(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _inline(text: str, page: Path, root: Path, pages: set[Path], out_dir: Path) -> str:
    parts = re.split(r"(`+[^`]*`+)", text)
    res = []
    for part in parts:
        if part.startswith("`"):
            res.append(f"<code>{html.escape(part.strip('`').strip())}</code>")
            continue

        def link(m):
            target = m.group("target").strip("<>")
            label = html.escape(m.group("text"))
            if _SCHEME.match(target) or target.startswith("//"):
                href = target
            else:
                path_part, _, frag = target.partition("#")
                dest = (page.parent / path_part).resolve() if path_part else page
                if dest in pages:
                    pid = _page_id(root, dest)
                    href = f"#{pid}:{frag}" if frag else f"#{pid}"
                else:
                    href = os.path.relpath(dest, out_dir) + (f"#{frag}" if frag else "")
            return f'<a href="{html.escape(href, quote=True)}">{label}</a>'

        # links first (on the raw text, so their URLs are not escaped twice), then escape the rest
        pieces, last = [], 0
        for m in _LINK.finditer(part):
            pieces.append(html.escape(part[last:m.start()]))
            pieces.append(link(m))
            last = m.end()
        pieces.append(html.escape(part[last:]))
        s = "".join(pieces)
        s = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)
        s = re.sub(r"(?<![*\w])\*([^*\s][^*]*)\*(?![*\w])", r"<em>\1</em>", s)
        res.append(s)
    return "".join(res)


def to_html(path: Path, root: Path, pages: set[Path], out_dir: Path) -> str:
    """One page as an HTML fragment (a small Markdown subset; anything else stays readable text)."""
    pid = _page_id(root, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    out, para, i = [], [], 0
    seen: dict[str, int] = {}

    def inline(t):
        return _inline(t, path, root, pages, out_dir)

    def flush():
        if para:
            out.append("<p>" + inline(" ".join(para)) + "</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            flush()
            fence, body = m.group(1), []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith(fence):
                body.append(lines[i])
                i += 1
            out.append("<pre><code>" + html.escape("\n".join(body)) + "</code></pre>")
            i += 1
            continue
        h = _HEADING.match(line)
        if h:
            flush()
            level, title = len(h.group("hashes")), h.group("title")
            base = slugify(title)
            n = seen.get(base, 0)
            seen[base] = n + 1
            hid = f"{pid}:{base if n == 0 else f'{base}-{n}'}"
            out.append(f'<h{level} id="{html.escape(hid, quote=True)}">{inline(title)}</h{level}>')
            i += 1
            continue
        if line.lstrip().startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(lines[i].strip().strip("|"))
                i += 1
            cells = [[c.strip() for c in re.split(r"(?<!\\)\|", r)] for r in rows]
            sep = {k for k, r in enumerate(cells) if all(re.fullmatch(r":?-+:?", c) for c in r if c)}
            header = 1 in sep
            table = ["<table>"]
            for k, r in enumerate(cells):
                if k in sep:
                    continue
                tag = "th" if header and k == 0 else "td"
                table.append("<tr>" + "".join(f"<{tag}>{inline(c)}</{tag}>" for c in r) + "</tr>")
            table.append("</table>")
            out.append("\n".join(table))
            continue
        item = re.match(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$", line)
        if item:
            flush()
            ordered = item.group(2)[0].isdigit()
            tag = "ol" if ordered else "ul"
            items = []
            while i < len(lines):
                it = re.match(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$", lines[i])
                if it:
                    items.append(it.group(3))
                elif lines[i].strip() and lines[i].startswith((" ", "\t")) and items:
                    items[-1] += " " + lines[i].strip()  # continuation of the item
                else:
                    break
                i += 1
            out.append(f"<{tag}>" + "".join(f"<li>{inline(x)}</li>" for x in items) + f"</{tag}>")
            continue
        if _COMMENT.match(line):
            i += 1
            continue
        if not line.strip():
            flush()
        else:
            para.append(line.strip())
        i += 1
    flush()
    return f'<section id="{html.escape(pid, quote=True)}">\n' + "\n".join(out) + "\n</section>"


def page_order(root: Path) -> list[Path]:
    """README, docs/index.md, then pages in the order docs/index.md links them, then the rest
    (developer pages under docs/dev/ are not included)."""
    files = user_pages(root)
    order = [p for p in (root / "README.md", root / "docs" / "index.md") if p in files]
    index = root / "docs" / "index.md"
    if index.is_file():
        for _, target in links(index):
            dest = (index.parent / target.partition("#")[0]).resolve()
            if dest in files and dest not in order:
                order.append(dest)
    return order + [p for p in files if p not in order]


def build(root: Path, out_dir: Path) -> Path:
    """Write out_dir/index.html from every page; returns its path."""
    root = root.resolve()
    out_dir = out_dir.resolve()
    pages = [p.resolve() for p in page_order(root)]
    pset = set(pages)
    toc = "".join(f'<li><a href="#{html.escape(_page_id(root, p), quote=True)}">{html.escape(_page_id(root, p))}</a></li>'
                  for p in pages)
    body = "\n".join(to_html(p, root, pset, out_dir) for p in pages)
    doc = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kernelgen documentation</title>\n"
           "<style>body{max-width:60rem;margin:auto;padding:1rem;font-family:sans-serif;line-height:1.45}"
           "pre{background:#f4f4f4;padding:.6rem;overflow-x:auto}code{font-size:90%}"
           "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem}"
           "section{border-top:2px solid #ddd;margin-top:2rem}</style></head><body>\n"
           f"<nav><h1>kernelgen documentation</h1><ul>{toc}</ul></nav>\n{body}\n</body></html>\n")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "index.html"
    target.write_text(doc, encoding="utf-8")
    return target


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Check the docs' links and build docs/_build/index.html.")
    ap.add_argument("--check", action="store_true", help="check links only, write nothing")
    ap.add_argument("--out", metavar="DIR", default=None, help=f"output directory (default: {BUILD_DIR})")
    ap.add_argument("--root", metavar="DIR", default=str(REPO), help="repository root (default: this checkout)")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    errors = check_links(root)
    n = len(checked_files(root))
    if errors:
        print(f"{len(errors)} broken link(s) in {n} Markdown files:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    print(f"links ok in {n} Markdown files")
    if not args.check:
        target = build(root, Path(args.out) if args.out else root / BUILD_DIR)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
