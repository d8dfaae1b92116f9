"""Request-length traces: real per-request token counts used as benchmark and demo input.

A trace is a CSV file with a header row that has (at least) the columns ``context_tokens`` and
``generated_tokens``; one row is one request, in arrival order (the schema of
``shared/data/traces/``).  The package ships a 2000-row sample of the Azure LLM inference trace
2023 (conversation), CC-BY-4.0; see ``kernelgen/apps/data/ATTRIBUTION.md``.
"""
from __future__ import annotations

import csv
import io
from importlib import resources
from pathlib import Path

#: File name of the packaged sample inside ``kernelgen/apps/data/``.
SAMPLE_NAME = "azure_conv_sample.csv"
#: Default prefill batch of ``kernelgen demo``: a token budget and a per-request cap, in tokens.
DEFAULT_MAX_TOKENS = 32768
DEFAULT_MAX_LEN = 8192

_COLUMNS = ("context_tokens", "generated_tokens")


def sample_trace_path() -> str:
    """A printable location of the packaged sample (for messages; it may be inside a zip)."""
    return str(resources.files(__package__).joinpath("data").joinpath(SAMPLE_NAME))


def _read_text(path) -> tuple[str, str]:
    if path is None:
        res = resources.files(__package__).joinpath("data").joinpath(SAMPLE_NAME)
        try:
            return res.read_text(encoding="utf-8"), str(res)
        except (FileNotFoundError, OSError):  # a source checkout without package resources
            p = Path(__file__).resolve().parent / "data" / SAMPLE_NAME
            return p.read_text(encoding="utf-8"), str(p)
    p = Path(path).expanduser()
    try:
        return p.read_text(encoding="utf-8"), str(p)
    except FileNotFoundError:
        raise FileNotFoundError(f"trace file {p} does not exist") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not a UTF-8 text CSV file ({e})") from None


def load_trace(path=None) -> list[tuple[int, int]]:
    """Read a request-length trace.

    Args:
        path: CSV file (str or PathLike) with a header naming ``context_tokens`` and
            ``generated_tokens`` (other columns, e.g. ``timestamp_s``, are ignored).
            None reads the packaged Azure LLM 2023 conversation sample (2000 requests).

    Returns:
        One ``(context_tokens, generated_tokens)`` pair of non-negative ints (tokens) per row,
        in file order.  Blank lines are skipped.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not a valid trace: missing header or column, a row with the
            wrong number of fields, a value that is not a non-negative integer, or no rows at all.
            The message names the file and the 1-based line number.
    """
    text, name = _read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    header = None
    cols: tuple[int, int] | None = None
    rows: list[tuple[int, int]] = []
    try:
        for fields in reader:
            line = reader.line_num
            if not fields or all(not f.strip() for f in fields):
                continue
            if header is None:
                header = [f.strip() for f in fields]
                missing = [c for c in _COLUMNS if c not in header]
                if missing:
                    raise ValueError(
                        f"{name}:{line}: header {header} lacks column(s) {missing}; a trace needs "
                        f"a header row with {list(_COLUMNS)}"
                    )
                cols = (header.index(_COLUMNS[0]), header.index(_COLUMNS[1]))
                continue
            if len(fields) != len(header):
                raise ValueError(f"{name}:{line}: expected {len(header)} fields ({','.join(header)}), got {len(fields)}: {fields}")
            pair = []
            for col_name, idx in zip(_COLUMNS, cols):
                raw = fields[idx].strip()
                try:
                    val = int(raw)
                except ValueError:
                    raise ValueError(f"{name}:{line}: {col_name} must be an integer, got {raw!r}") from None
                if val < 0:
                    raise ValueError(f"{name}:{line}: {col_name} must be >= 0, got {val}")
                pair.append(val)
            rows.append((pair[0], pair[1]))
    except csv.Error as e:
        raise ValueError(f"{name}:{reader.line_num}: malformed CSV ({e})") from None
    if header is None:
        raise ValueError(f"{name}: empty trace file (no header row)")
    if not rows:
        raise ValueError(f"{name}: trace has a header but no request rows")
    return rows


def prefill_batch(lengths, max_requests: int | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                  max_len: int = DEFAULT_MAX_LEN) -> list[int]:
    """Prompt lengths of a prefill batch: consecutive requests from the start of a trace.

    Requests are taken in order, each capped at ``max_len`` tokens, until the next one would push
    the total past ``max_tokens`` or ``max_requests`` have been taken.  Deterministic: the same
    inputs always give the same batch.

    Args:
        lengths: context lengths in tokens, as ints or as ``load_trace`` pairs (the first item,
            ``context_tokens``, is used).
        max_requests: most requests in the batch (None: no limit).
        max_tokens: token budget of the whole batch (sum of the capped lengths), >= 1.
        max_len: cap on one request's length in tokens, >= 1.

    Returns:
        The capped lengths of the chosen requests (tokens), in trace order.

    Raises:
        ValueError: a bound is < 1, a length is negative, or not even the first request fits
            in ``max_tokens``.
    """
    if max_tokens < 1 or max_len < 1 or (max_requests is not None and max_requests < 1):
        raise ValueError(f"max_tokens, max_len and max_requests must be >= 1, got {max_tokens}, {max_len}, {max_requests}")
    out: list[int] = []
    total = 0
    for item in lengths:
        n = int(item[0] if isinstance(item, (tuple, list)) else item)
        if n < 0:
            raise ValueError(f"request lengths must be >= 0, got {n}")
        n = min(n, max_len)
        if total + n > max_tokens or (max_requests is not None and len(out) >= max_requests):
            break
        out.append(n)
        total += n
    if not out:
        raise ValueError(f"the first request does not fit in max_tokens={max_tokens} (cap it with a smaller max_len)")
    return out
