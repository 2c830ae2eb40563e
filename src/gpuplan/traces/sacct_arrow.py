"""The fast path of the `sacct -P` reader for large, clean files: pyarrow's CSV reader splits the rows
(in threads), step rows are checked and folded by Arrow compute, and allocation rows go through the
same column parsers and assembler as the exact path (traces/sacct.py). Anything unusual raises
`Fallback` and the exact path reads the file again, naming any problem by its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.traces.base import ReadOptions, TraceError, TraceResult
from gpuplan.traces.rows import is_gzip
from gpuplan.traces.sacct_jobs import (
    Collector,
)
from gpuplan.traces.sacct_text import TextParser, columns, text_notes
from gpuplan.traces.sacct_values import (
    JOBID_RE,
    MAX_EPOCH_S,
    NO_TIME,
    BadValue,
)

__all__ = ["MIN_BYTES", "Fallback", "read_arrow", "worth_it"]

MIN_BYTES = 4 << 20  # below this, importing pyarrow costs more than it saves
_ARROW_BLOCK_BYTES = 4 << 20
_SCAN_BYTES = 8 << 20
# RE2 patterns for the Arrow path. Each accepts a subset of what the Python parsers accept and gives the
# same value, so a file the Arrow path reads gives exactly what the exact path gives. Anything else
# (a value in another form, a bad value) sends the whole file to the exact path.
_RE2_SPACE = r"\t\n\v\f\r "  # Python's \s under re.ASCII
_RE2_TRES = rf"[^=,{_RE2_SPACE}]+=[^=,{_RE2_SPACE}]+(?:,[^=,{_RE2_SPACE}]+=[^=,{_RE2_SPACE}]+)*"
_RE2_SIZE = r"^(?P<n>\d{1,15}(?:\.\d{1,9})?)(?P<u>[KMGTP]?)$"
_RE2_PCT = r"^\d{1,15}(?:\.\d{1,9})?$"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
_RE2_TIME = (
    r"^(?:19[7-9]\d|[2-9]\d{3})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d$"
)
_UNITS = ("", "K", "M", "G", "T", "P")


class Fallback(Exception):
    """The Arrow path cannot vouch for this file; the exact path reads it instead."""


def worth_it(path: Path) -> bool:
    try:
        return path.stat().st_size >= MIN_BYTES and not is_gzip(path)
    except OSError:
        return False


def _clean_bytes(path: Path) -> bool:
    """Whether every carriage return in the file is part of a CR LF line end: Arrow also ends a row at a
    lone carriage return, where the exact reader keeps it inside the line."""
    buffer = bytearray(_SCAN_BYTES)
    with path.open("rb") as f:
        while n := f.readinto(buffer):
            block = memoryview(buffer)[:n].tobytes() if n < len(buffer) else buffer
            if block.count(b"\r") != block.count(b"\r\n"):
                return False
    return True


def _require(ok: Any) -> None:
    if ok is not True and getattr(ok, "as_py", lambda: ok)() is not True:
        raise Fallback


def read_arrow(path: Path, options: ReadOptions, fmt: str) -> TraceResult:
    """Read a large, clean `sacct -P` file with pyarrow: its CSV reader splits the rows (in threads), step
    rows are checked and folded by Arrow compute, and allocation rows go through the same column parsers
    and assembler as the exact path.

    Raises:
        Fallback: anything the exact path must look at (a bad or unusual value, a blank line, a wrong
            field count, a duplicate id), or pyarrow is missing.
    """
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pcsv
    except ImportError as e:
        raise Fallback from e
    with path.open("rb") as f:
        raw = f.readline()
    try:
        first = raw.decode("utf-8").removeprefix("\ufeff").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise Fallback from e
    if not first.strip() or not _clean_bytes(path):
        raise Fallback
    out = Collector(path, options.skip_bad)
    parser = TextParser(path, columns(path, 1, first), out)
    width = parser.cols.width
    names = [f"f{i}" for i in range(width)]
    try:
        reader = pcsv.open_csv(
            path,
            read_options=pcsv.ReadOptions(block_size=_ARROW_BLOCK_BYTES, skip_rows=1, column_names=names),
            parse_options=pcsv.ParseOptions(
                delimiter="|", quote_char=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pcsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False
            ),
        )
        offset = 2  # the line of the first data row: the header is line 1 and no line is blank
        for batch in reader:
            _arrow_batch(pa, pc, parser, batch, offset)
            offset += batch.num_rows
    except (pa.ArrowException, BadValue, InputError, ValueError, OverflowError) as e:
        raise Fallback from e
    if out.skipped:
        raise Fallback
    try:
        return out.result(fmt, text_notes(options, fmt, parser))
    except TraceError as e:
        raise Fallback from e


def _arrow_batch(pa: Any, pc: Any, parser: TextParser, batch: Any, offset: int) -> None:
    _require(batch.num_columns == parser.cols.width)
    ids = batch.column(parser.i_id)
    is_step = pc.match_substring(ids, ".")
    if pc.any(is_step).as_py():
        steps = pc.filter(ids, is_step)
        _require(pc.all(pc.match_substring_regex(steps, f"^{JOBID_RE.pattern}$")))
    _arrow_usage(pa, pc, parser, batch, ids)
    is_job = pc.invert(is_step)
    jobs = batch.filter(is_job)
    if not jobs.num_rows:
        return
    columns = [column.to_pylist() for column in jobs.columns]
    rows = list(zip(*columns))
    numbers = [offset + k for k in pc.indices_nonzero(is_job).to_pylist()]
    times: dict[str, list[Any]] = {
        name: _arrow_times(pa, pc, jobs.column(parser.cols.index[name]))
        for name in ("Submit", "Start", "End")
        if name in parser.cols.index
    }
    parser.commit(numbers, rows, parser.jobs(rows, columns, times), None)


def _arrow_times(pa: Any, pc: Any, cells: Any) -> list[float | None]:
    """Seconds of time cells in the form sacct prints (`cell_time`), None for None/Unknown/empty."""
    canonical = pc.match_substring_regex(cells, _RE2_TIME)
    _require(pc.all(pc.or_(canonical, pc.is_in(cells, value_set=pa.array(sorted(NO_TIME))))))
    masked = pc.if_else(canonical, cells, None)
    stamps = pc.strptime(masked, format=_TIME_FORMAT, unit="s", error_is_null=True)
    # strptime turns 2026-02-30 into March 2 where fromisoformat refuses it. The pattern bounds every
    # other field, so a day that moved is the only change to look for.
    written_day = pc.cast(pc.utf8_slice_codeunits(masked, 8, 10), pa.int64())
    _require(pc.all(pc.equal(pc.day(stamps), written_day)))
    _require(pc.equal(pc.count(masked), pc.count(stamps)))
    seconds = pc.cast(pc.cast(stamps, pa.int64()), pa.float64())
    if pc.count(seconds).as_py():
        _require(pc.less(pc.max(seconds), pa.scalar(MAX_EPOCH_S)))  # the exact path says what is wrong
    values: list[float | None] = seconds.to_pylist()
    return values


def _arrow_usage(pa: Any, pc: Any, parser: TextParser, batch: Any, ids: Any) -> None:
    """Fold the MaxRSS and TRESUsageInMax of every row into its job's peaks, in Arrow."""
    usage: dict[str, Any] = {}
    if parser.i_rss is not None:
        usage["rss"] = _arrow_sizes(pa, pc, batch.column(parser.i_rss))
    if parser.i_usage is not None:
        usage |= _arrow_gpu_usage(pa, pc, batch.column(parser.i_usage))
    if not usage:
        return
    table = pa.table({"key": pc.struct_field(pc.extract_regex(ids, r"^(?P<k>[^.]*)"), "k"), **usage})
    some = None
    for name in usage:
        valid = pc.is_valid(table[name])
        some = valid if some is None else pc.or_(some, valid)
    table = table.filter(some)
    if not table.num_rows:
        return
    peaks = table.group_by("key").aggregate([(name, "max") for name in usage])
    keys = peaks["key"].to_pylist()
    values = {name: peaks[f"{name}_max"].to_pylist() for name in usage}
    none = [None] * len(keys)
    for key, rss, gpumem, gpuutil in zip(
        keys, values.get("rss", none), values.get("gpumem", none), values.get("gpuutil", none)
    ):
        parser.out.add_usage(key, rss, gpumem, gpuutil)


def _arrow_sizes(pa: Any, pc: Any, cells: Any) -> Any:
    """Bytes of size cells (`_size`), null for empty ones."""
    parts = pc.extract_regex(cells, _RE2_SIZE)
    _require(pc.all(pc.or_(pc.is_valid(parts), pc.equal(cells, ""))))
    multiplier = pc.take(
        pa.array([float(1 << (10 * k)) for k in range(len(_UNITS))]),
        pc.index_in(pc.struct_field(parts, "u"), value_set=pa.array(_UNITS)),
    )
    number = pc.cast(pc.struct_field(parts, "n"), pa.float64())
    return pc.cast(
        pc.round(pc.multiply(number, multiplier), ndigits=0, round_mode="half_to_even"), pa.int64()
    )


def _arrow_gpu_usage(pa: Any, pc: Any, cells: Any) -> dict[str, Any]:
    """gres/gpumem bytes and gres/gpuutil percent of TRESUsageInMax cells (`cell_usage`), after checking them all."""
    _require(pc.all(pc.match_substring_regex(cells, f"^(?:{_RE2_TRES})?$")))
    if not pc.any(pc.match_substring(cells, "gres/gpu")).as_py():
        return {}
    found: dict[str, Any] = {}
    for name in ("gpumem", "gpuutil"):
        _require(pc.max(pc.count_substring(cells, f"gres/{name}=")).as_py() <= 1)  # Python keeps the last
        found[name] = pc.struct_field(pc.extract_regex(cells, rf"(?:^|,)gres/{name}=(?P<v>[^,]*)"), "v")
    gpumem = _arrow_sizes(pa, pc, pc.fill_null(found["gpumem"], ""))
    util = found["gpuutil"]
    _require(pc.all(pc.match_substring_regex(util, _RE2_PCT)))  # nulls (absent) are skipped
    return {"gpumem": gpumem, "gpuutil": pc.cast(util, pa.float64())}
