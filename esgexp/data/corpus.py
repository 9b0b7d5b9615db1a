"""The corpus store: a folder of documents -> one corpus folder, and ``Corpus.load`` to read it back.

Layout of a corpus folder: ``pages.jsonl`` (doc_id, page, page_index, text), ``passages.jsonl``
(``Passage`` fields: per document its text passages, then its table passages when tables were extracted),
``tables.jsonl`` (with tables only: ``Table`` fields and page_index, one per table passage), ``manifest.json`` (per document:
file, sha256 of its bytes, counts or the skip reason; the chunker and table extractor configs) and
``report.json`` (counts, skipped files, seconds, chunker, tables, corpus_hash).
Re-ingesting reads only the documents whose bytes changed; the rest come from the stored files.

A table's text stays in its page's text (and so in the text passages): the page map is the verbatim page
that evidence is checked against, and the table passage adds the table's structure beside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from esgexp.core.outputs import NoSpace, json_lines, no_space, write_atomic, write_json
from esgexp.core.records import Passage, hash_line, lines_hash, passages_hash
from esgexp.data import pdf
from esgexp.data.chunking import Chunker
from esgexp.data.pdf import Page, UnreadableDocument
from esgexp.data.tables import Table, TableExtractor
from esgexp.data.text_files import decoding_problem
from esgexp.errors import UserError

log = logging.getLogger(__name__)

SUFFIXES = (".pdf", ".md", ".txt")
# A long PDF read by several workers is cut into page ranges of at least this many pages (the 300-page shared
# reports with 2 workers: 2 each).
PAGES_PER_UNIT = 64
INGEST_HINT = "build it with: python -m esgexp.ingest corpus.pdf_dir=DIR corpus.name=NAME [chunker=...]"


def read_document(path: Path, reader: str = "pdfium") -> list[Page]:
    """A PDF's page map (read by ``reader``, pdf.READERS), or a ``.md``/``.txt`` file as one page with its line
    breaks kept."""
    if path.suffix.lower() == ".pdf":
        return pdf.read_pages(path, reader)
    try:
        text = pdf.clean_text(path.read_text(encoding="utf-8"), keep_lines=True)
    except UnicodeDecodeError as error:
        raise UnreadableDocument(decoding_problem(path, setting=None)) from error
    if not text:
        raise UnreadableDocument("no text")
    return [Page(1, text)]


@dataclass(frozen=True)
class Lines:
    """Corpus records written out in UTF-8 (one document's, or the corpus's): pages.jsonl and passages.jsonl
    lines, and the passages' lines of the corpus hash (``records.hash_line``)."""

    pages: bytes = b""
    passages: bytes = b""
    hashed: bytes = b""

    @classmethod
    def of(cls, doc_id: str, pages: list[Page], passages: list[Passage]) -> Lines:
        """The lines of one document's pages and passages."""
        page_records = ({"doc_id": doc_id, "page": p.page, "page_index": p.page_index, "text": p.text} for p in pages)
        return cls(
            "".join(map(_line, page_records)).encode(),
            "".join(_line(passage.record()) for passage in passages).encode(),
            "".join(map(hash_line, passages)).encode(),
        )

    @classmethod
    def joined(cls, parts: list[Lines]) -> Lines:
        """The lines of ``parts`` one after the other."""
        return cls(*(b"".join(getattr(part, name) for part in parts) for name in ("pages", "passages", "hashed")))


@dataclass
class Parsed:
    """What reading one file gave: its pages, their passages and both written out (``lines``), or why it is
    skipped (``crashed``: its worker died on it, which the next ingest tries again); its tables, or why they
    are not there."""

    pages: list[Page] = dataclasses.field(default_factory=list)
    passages: list[Passage] = dataclasses.field(default_factory=list)
    lines: Lines = Lines()
    skipped: str | None = None
    crashed: bool = False
    tables: list[Table] | None = None
    tables_skipped: str | None = None


def parse(path: Path, doc_id: str, reader: str, tables: TableExtractor | None, chunker: Chunker | None) -> Parsed:
    """Read one file (in a worker process when ``ingest.workers`` > 1): its pages, their passages cut by
    ``chunker`` and their lines (with None its pages are not read: its stored ones are kept) and, with
    ``tables``, its tables. Nothing reading raises stops the other files."""
    try:
        pages = read_document(path, reader) if chunker else []
    except UnreadableDocument as error:
        return Parsed(skipped=str(error))
    except Exception as error:  # a bug in a PDF library on one file: that file is skipped, named
        return Parsed(skipped=f"cannot be read ({type(error).__name__}: {error})")
    passages = chunker.chunk(doc_id, pages) if chunker else []
    parsed = Parsed(pages, passages, Lines.of(doc_id, pages, passages))
    if tables is not None and path.suffix.lower() == ".pdf":
        try:
            parsed.tables = tables.extract(path, doc_id)
        except UnreadableDocument as error:
            parsed.tables_skipped = str(error)
    return parsed


def ingest(
    pdf_dir: Path | str,
    out_dir: Path | str,
    chunker: Chunker,
    progress: bool = True,
    tables: TableExtractor | None = None,
    reader: str = "pdfium",
    workers: int = 1,
    pages_per_unit: int = PAGES_PER_UNIT,
) -> dict:
    """Read every PDF/Markdown/text file under ``pdf_dir`` (PDF page text by ``reader``; with ``workers`` > 1,
    files and page ranges of long PDFs in that many processes: ``read_all``), chunk it, and write the corpus
    to ``out_dir``; with ``tables``, each PDF's tables become passages of kind ``table`` too. The corpus is
    the same whatever ``workers``.

    A file that cannot be read is skipped with a warning (and listed in the report); an unchanged file
    (same sha256, same reader) reuses its stored pages and, under the same chunker config, its passages
    (its tables under the same extractor config). Nothing is written before every file is read, so an
    interrupted ingest leaves the corpus as it was. Returns the report.
    """
    started = time.perf_counter()
    pdf_dir, out_dir = Path(pdf_dir).resolve(), Path(out_dir)
    files = _find_files(pdf_dir)
    config = chunker.config()
    stored = _Stored.read(out_dir, reader)
    same_chunker = stored.manifest.get("chunker") == config
    tables_config = tables.config() if tables else None
    same_tables = stored.manifest.get("tables") == tables_config
    opened = [_open(path, pdf_dir, stored, same_tables or tables is None) for path in files]
    todo = [(path, entry["doc_id"], not reused) for path, (entry, reused) in zip(files, opened) if entry.get("parse")]
    parsed = read_all(todo, reader, tables, chunker, workers, progress, pages_per_unit)
    documents, written, found_tables, skipped = {}, [], [], []
    counts = {"n_parsed": sum(1 for *_, whole in todo if whole), "n_reused": sum(1 for _, reused in opened if reused)}
    for path, (entry, reused) in zip(files, opened):
        doc_id, name = entry.pop("doc_id"), entry["file"]
        result = parsed.get(path) if entry.pop("parse", False) else None
        if result is not None and result.skipped:
            entry.update({"skipped": result.skipped, **({"crashed": True} if result.crashed else {})})
        if "skipped" not in entry and doc_id in documents:
            entry = {"file": name, "skipped": f"same document id {doc_id!r} as {documents[doc_id]['file']}"}
        if "skipped" in entry:
            log.warning(
                "skipped: %s: %s", pdf_dir / name, entry["skipped"]
            )  # name: printable even when the bytes are not
            skipped.append({"file": name, "reason": entry["skipped"]})
            documents.setdefault(doc_id, entry)
            continue
        if reused:
            doc_pages = stored.pages[doc_id]
            doc_passages = stored.passages.get(doc_id, []) if same_chunker else chunker.chunk(doc_id, doc_pages)
            doc_lines = Lines.of(doc_id, doc_pages, doc_passages)
        else:
            doc_pages, doc_passages, doc_lines = result.pages, result.passages, result.lines
        if result is not None:
            doc_tables = result.tables or []
        else:
            doc_tables = stored.tables.get(doc_id, []) if same_tables else []
        if result is not None and result.tables_skipped:
            log.warning("tables skipped: %s: %s", path, result.tables_skipped)
            entry["tables_skipped"] = result.tables_skipped
        blank = sum(1 for page in doc_pages if not page.text)
        documents[doc_id] = {
            **entry,
            "n_pages": len(doc_pages),
            "n_chunks": len(doc_passages),
            "n_tables": len(doc_tables),
            "n_pages_without_text": blank,
        }
        written += [doc_lines, Lines.of(doc_id, [], [table.passage() for table in doc_tables])]
        found_tables += doc_tables
    kept = [entry for entry in documents.values() if "skipped" not in entry]
    if not kept:
        raise UserError(
            f"no readable document in {pdf_dir}: " + "; ".join(f"{s['file']}: {s['reason']}" for s in skipped)
        )
    report = {
        "pdf_dir": str(pdf_dir),
        "n_docs": len(kept),
        "n_pages": sum(entry["n_pages"] for entry in kept),
        "n_chunks": sum(entry["n_chunks"] + entry["n_tables"] for entry in kept),
        "n_tables": len(found_tables),
        "skipped": skipped,
        "pages_without_text": {
            entry["file"]: entry["n_pages_without_text"]
            for entry in documents.values()
            if entry.get("n_pages_without_text")
        },
        **counts,
        "reader": reader_version(reader),
        "workers": workers,
        "chunker": config,
        "tables": tables_config,
    }
    corpus = Lines.joined(written)
    report["corpus_hash"] = lines_hash(corpus.hashed)
    manifest = {"reader": reader_version(reader), "chunker": config, "tables": tables_config, "documents": documents}
    _write(out_dir, corpus, found_tables, manifest)
    report["seconds"] = round(time.perf_counter() - started, 3)
    write_json(out_dir / "report.json", report)
    return report


def read_all(
    todo: list[tuple[Path, str, bool]],
    reader: str,
    tables: TableExtractor | None,
    chunker: Chunker,
    workers: int,
    progress: bool,
    pages_per_unit: int = PAGES_PER_UNIT,
) -> dict[Path, Parsed]:
    """Each file of ``todo`` (path, document id, whether its pages are read) parsed and its pages chunked, with a
    progress bar over the work: in this process for one worker, else by ``workers`` worker processes, one unit
    each at a time (``work_units``). A unit is a file, read and chunked in its worker, or a page range (of at
    least ``pages_per_unit`` pages) of a long PDF read by pdfium (its tables, when asked for, one more unit),
    so the longest report does not bound the run; a split PDF's pages come out as one reading of the whole
    file gives them (``pdf.join_ranges``), joined and chunked here as soon as its last range is in, while the
    workers read on. A file whose worker dies on it (a PDF library crashing, out of memory) is skipped, named;
    Ctrl-C stops the workers at once. The results are keyed by path: the order they come in does not matter."""
    from tqdm import tqdm

    jobs = [(path, doc_id, reader, tables, chunker if whole else None) for path, doc_id, whole in todo]
    units = [(parse, job) for job in jobs] if workers <= 1 else work_units(jobs, workers, pages_per_unit)
    gathered = _Gathered(units, chunker, {path: doc_id for path, doc_id, _ in todo})
    bar = tqdm(total=len(units), desc="ingest", unit="part", disable=not progress)

    def take(unit: tuple, result) -> None:
        bar.set_postfix_str(unit[1][0].name)
        gathered.take(unit, result)
        bar.update()

    try:
        if workers <= 1 or len(units) <= 1:
            for function, args in units:
                take((function, args), function(*args))
        else:
            _in_processes(units, workers, take)
    finally:
        bar.close()
    return gathered.found


def work_units(jobs: list[tuple], workers: int, pages_per_unit: int) -> list[tuple]:
    """(function, arguments) units for the jobs (path, doc_id, reader, tables, chunker or None): ``parse`` of a
    whole file, or for a PDF read by pdfium of more than its share of the pages (all of them over twice the
    workers, and at least ``pages_per_unit``: each range opens the PDF again), ``parse_range`` of each of the
    fewest ranges of equal size within that share (and ``parse`` of its tables alone, chunker None, when
    tables are asked for). The split PDFs' units come first, one PDF after another, then the whole files':
    a split PDF is whole early, so its joining and chunking here overlap the reading of the rest; the
    largest first each time."""
    counts = [_page_count(path, reader) if chunker else 0 for path, _, reader, _, chunker in jobs]
    share = max(pages_per_unit, math.ceil(sum(counts) / (2 * workers)))
    split, whole = [], []
    for (path, doc_id, reader, tables, chunker), count in zip(jobs, counts):
        size = _size(path)
        if count <= share:
            whole.append(((size,), (parse, (path, doc_id, reader, tables, chunker))))
            continue
        parts = math.ceil(count / share)
        for part in range(parts):
            pages = range(count * part // parts, count * (part + 1) // parts)
            split.append(((size, len(pages)), (parse_range, (path, reader, pages))))
        if tables is not None:
            split.append(((size, count), (parse, (path, doc_id, reader, tables, None))))
    return [unit for group in (split, whole) for _, unit in sorted(group, key=lambda pair: pair[0], reverse=True)]


def _page_count(path: Path, reader: str) -> int:
    """A PDF's page count when pdfium reads it, else 0 (a file that cannot be opened: ``parse`` says why)."""
    if reader != "pdfium" or path.suffix.lower() != ".pdf":
        return 0
    try:
        return pdf.page_count(path)
    except Exception:  # unreadable: parse names the reason
        return 0


def parse_range(path: Path, reader: str, pages: range) -> pdf.PageRange | Parsed:
    """Some pages of a PDF (``pdf.read_range``), or why the file is skipped."""
    try:
        return pdf.read_range(path, reader, pages)
    except UnreadableDocument as error:
        return Parsed(skipped=str(error))
    except Exception as error:  # a bug in a PDF library: the file is skipped, named
        return Parsed(skipped=f"cannot be read ({type(error).__name__}: {error})")


class _Gathered:
    """Each file's ``Parsed`` (``found``, by path) from its units' results as they come in (``take``): a whole
    file's as it came; a split PDF's ranges, once all are in, joined in page order, chunked and written out
    (or the first failure among them), with its tables' unit."""

    def __init__(self, units: list[tuple], chunker: Chunker, doc_ids: dict[Path, str]):
        self.chunker, self.doc_ids = chunker, doc_ids
        self.found: dict[Path, Parsed] = {}
        self.ranges: dict[Path, list] = {}
        self.expected = Counter(args[0] for function, args in units if function is parse_range)

    def take(self, unit: tuple, result) -> None:
        """One unit's result."""
        function, args = unit
        path = args[0]
        if function is parse and args[4] is not None:  # pages read: a whole file
            self.found[path] = result
        elif function is parse:  # a split PDF's tables
            parsed = self.found.setdefault(path, Parsed())
            parsed.tables, parsed.tables_skipped = result.tables, result.tables_skipped or result.skipped
        else:
            parts = self.ranges.setdefault(path, [])
            parts.append(result)
            if len(parts) == self.expected[path]:
                self._join(path, parts)

    def _join(self, path: Path, parts: list) -> None:
        """A split PDF's ``Parsed`` from the results of all its ranges."""
        parsed = self.found.setdefault(path, Parsed())
        failed = [part for part in parts if isinstance(part, Parsed)]
        if failed:
            parsed.skipped, parsed.crashed = failed[0].skipped, failed[0].crashed
            return
        try:
            parsed.pages = pdf.join_ranges(sorted(parts, key=lambda part: part.first))
        except UnreadableDocument as error:
            parsed.skipped = str(error)
            return
        doc_id = self.doc_ids[path]
        parsed.passages = self.chunker.chunk(doc_id, parsed.pages)
        parsed.lines = Lines.of(doc_id, parsed.pages, parsed.passages)


def _in_processes(units: list[tuple], workers: int, take) -> None:
    """``function(*args)`` of each (function, args) unit, started in the order given, by ``workers`` worker
    processes holding one unit each at a time; ``take(unit, result)`` of each result as it comes in, once the
    worker that gave it has its next unit. A worker that dies is known by its unit, whose result is a crashed
    ``Parsed``, and another worker takes its place."""
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context()
    waiting = list(reversed(range(len(units))))
    busy, idle = {}, []  # busy: connection -> (process, unit index)
    finished: list[tuple[int, object]] = []  # (unit index, result) not yet taken
    try:
        while waiting or busy or finished:
            while waiting and len(busy) < workers:
                connection, process = idle.pop() if idle else _start_worker(context)
                index = waiting.pop()
                connection.send(units[index])
                busy[connection] = (process, index)
            for index, result in finished:
                take(units[index], result)
            finished = [_received(connection, busy, idle) for connection in wait(list(busy))] if busy else []
    except BaseException:
        for process, _ in busy.values():
            process.terminate()
        raise
    finally:
        for connection, _ in idle:
            with contextlib.suppress(OSError):
                connection.send(None)  # done: the worker returns
        for process in [process for _, process in idle] + [process for process, _ in busy.values()]:
            process.join()


def _received(connection, busy: dict, idle: list) -> tuple[int, object]:
    """The (unit index, result) a busy worker answered, the worker now idle; a crashed ``Parsed`` when it died
    on its unit (it is then gone)."""
    process, index = busy.pop(connection)
    try:
        result = connection.recv()
    except EOFError:  # the worker died on this unit
        process.join()
        connection.close()
        return index, Parsed(skipped=f"reading it crashed ({_ended(process.exitcode)})", crashed=True)
    idle.append((connection, process))
    return index, result


def _start_worker(context) -> tuple:
    """A worker process and the connection to it."""
    ours, theirs = context.Pipe()
    process = context.Process(target=_work, args=(theirs,), daemon=True)
    process.start()
    theirs.close()  # only the worker holds its end: that end closing without an answer is a crash
    return ours, process


def _ended(exitcode: int | None) -> str:
    """How a process ended: ``killed by SIGSEGV`` or ``exit code 1``."""
    import signal

    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _work(connection) -> None:
    """A worker process: ``function(*args)`` of each (function, args) unit it is sent, answered, until it is
    sent None. It ignores Ctrl-C: the ingest process gets it and stops the workers."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while (unit := connection.recv()) is not None:
        function, args = unit
        connection.send(function(*args))


def _size(path: Path) -> int:
    """A file's size in bytes (0 when it cannot be read: its parse then says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def check_source(out_dir: Path, pdf_dir: Path) -> None:
    """Refuse to write into ``out_dir`` a corpus of ``pdf_dir`` when its report.json says it was ingested
    from another document folder (``overwrite=true`` replaces it)."""
    try:
        source = json.loads((out_dir / "report.json").read_text(encoding="utf-8")).get("pdf_dir")
    except (OSError, ValueError, AttributeError):
        return  # no finished corpus there
    if source and Path(source) != Path(pdf_dir).resolve():
        raise UserError(
            f"corpus {out_dir} was ingested from {source}, not {Path(pdf_dir).resolve()}: choose another "
            "corpus.name, or overwrite=true to replace it"
        )


def _find_files(pdf_dir: Path) -> list[Path]:
    if not pdf_dir.is_dir():
        raise UserError(f"document folder not found: {pdf_dir}")
    files = sorted(p for p in pdf_dir.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise UserError(f"no .pdf, .md or .txt files in {pdf_dir}")
    return files


def reader_version(reader: str = "pdfium") -> str:
    """What turned the files into pages (``pdfium 5.15.2, cleaning 1``): a stored corpus read by another
    reader or version is read again."""
    from importlib.metadata import version

    package = "pypdfium2" if reader == "pdfium" else "pypdf"
    return f"{reader} {version(package)}, cleaning {pdf.CLEANING_VERSION}"


def document_id(name: str) -> str:
    """A file's path below the folder without its suffix, in Unicode NFC (a macOS NFD name matches its report name)."""
    return unicodedata.normalize("NFC", name.rsplit(".", 1)[0])


def _open(path: Path, pdf_dir: Path, stored: _Stored, same_tables: bool) -> tuple[dict, bool]:
    """One file's manifest entry (``doc_id``; ``skipped`` when unusable; ``parse`` when it must be read: whole,
    or only its tables when they were extracted otherwise) and whether its stored pages are reused."""
    name = path.relative_to(pdf_dir).as_posix()
    readable = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if readable != name:  # bytes that are not UTF-8 in the name: it could not be written to the corpus files
        return {
            "file": readable,
            "doc_id": document_id(readable),
            "skipped": "the file name is not valid UTF-8; rename it",
        }, False
    doc_id = document_id(name)
    try:
        entry = {"file": name, "doc_id": doc_id, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    except OSError as error:
        return {"file": name, "doc_id": doc_id, "skipped": f"cannot read the file ({error.strerror})"}, False
    old = stored.unchanged(doc_id, entry["sha256"])
    if old is not None and "skipped" in old:
        return {**entry, "skipped": old["skipped"]}, True
    if old is not None:
        return ({**entry, "parse": True} if not same_tables and path.suffix.lower() == ".pdf" else entry), True
    return {**entry, "parse": True}, False


def _write(out_dir: Path, corpus: Lines, tables: list[Table], manifest: dict) -> None:
    """The data files first, the manifest last: a crash in between leaves a manifest that reuses nothing new."""
    files = {"pages.jsonl": corpus.pages, "passages.jsonl": corpus.passages}
    if manifest["tables"] is not None:
        files["tables.jsonl"] = "".join(_line(table.record()) for table in tables).encode()
    try:
        for name, data in files.items():
            write_atomic(out_dir / name, data)
    except NoSpace as full:  # what the whole corpus needs, not only the file that did not fit
        raise no_space(full.path, full.kept, sum(map(len, files.values()))) from full
    if manifest["tables"] is None:  # no extractor: no tables file (one left by an earlier ingest goes)
        (out_dir / "tables.jsonl").unlink(missing_ok=True)
    write_json(out_dir / "manifest.json", manifest)


def _line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


def _read_jsonl(path: Path) -> list[dict]:
    """Every record of a JSON Lines file; a bad line raises UserError naming the file and line."""
    with path.open(encoding="utf-8") as handle:
        return [record for _, record in json_lines(handle, path)]


def _group_pages(records: list[dict], path: Path) -> dict[str, list[Page]]:
    pages: dict[str, list[Page]] = {}
    for number, record in enumerate(records, start=1):
        try:
            pages.setdefault(record["doc_id"], []).append(Page(int(record["page"]), record["text"]))
        except (KeyError, TypeError, ValueError) as error:
            raise UserError(f"{path} record {number}: bad page record ({type(error).__name__}: {error})") from error
    return pages


def _passages(records: list[dict], path: Path) -> list[Passage]:
    try:
        return [Passage(**record) for record in records]
    except TypeError as error:
        raise UserError(f"{path}: bad passage record ({error})") from error


def _tables_file(path: Path) -> list[Table]:
    """The tables of a corpus folder's ``tables.jsonl`` (none when the file is absent)."""
    if not path.is_file():
        return []
    try:
        return [Table.from_record(record) for record in _read_jsonl(path)]
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(f"{path}: bad table record ({type(error).__name__}: {error})") from error


class _Stored:
    """What an earlier ingest left in the corpus folder; unreadable leftovers count as nothing stored."""

    def __init__(
        self,
        manifest: dict,
        pages: dict[str, list[Page]],
        passages: dict[str, list[Passage]],
        tables: dict[str, list[Table]],
    ):
        self.manifest, self.pages, self.passages, self.tables = manifest, pages, passages, tables

    @classmethod
    def read(cls, out_dir: Path, reader: str) -> _Stored:
        try:
            manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
            pages = _group_pages(_read_jsonl(out_dir / "pages.jsonl"), out_dir / "pages.jsonl")
            passages: dict[str, list[Passage]] = {}
            for passage in _passages(_read_jsonl(out_dir / "passages.jsonl"), out_dir / "passages.jsonl"):
                if passage.kind == "text":
                    passages.setdefault(passage.doc_id, []).append(passage)
            tables: dict[str, list[Table]] = {}
            for table in _tables_file(out_dir / "tables.jsonl"):
                tables.setdefault(table.doc_id, []).append(table)
        except FileNotFoundError:
            return cls({}, {}, {}, {})
        except (UserError, ValueError) as error:
            log.warning("%s: stored corpus unreadable (%s); every document is read again", out_dir, error)
            return cls({}, {}, {}, {})
        if manifest.get("reader") != reader_version(reader):
            log.info(
                "%s was read by %s; every document is read again with %s",
                out_dir,
                manifest.get("reader"),
                reader_version(reader),
            )
            return cls({}, {}, {}, {})
        return cls(manifest, pages, passages, tables)

    def unchanged(self, doc_id: str, sha256: str) -> dict | None:
        """The stored manifest entry of a document with these bytes, if its stored records are complete (a file
        its worker died on is read again)."""
        entry = self.manifest.get("documents", {}).get(doc_id)
        if not entry or entry.get("sha256") != sha256 or entry.get("crashed"):
            return None
        complete = (
            len(self.pages.get(doc_id, [])) == entry.get("n_pages")
            and len(self.passages.get(doc_id, [])) == entry.get("n_chunks")
            and len(self.tables.get(doc_id, [])) == entry.get("n_tables", 0)
        )
        return entry if "skipped" in entry or complete else None


@dataclass
class Corpus:
    """A corpus folder read back: passages in order, the page map per document, and a content hash."""

    path: Path
    passages: list[Passage]
    pages: dict[str, list[Page]]

    @classmethod
    def load(cls, path: Path | str) -> Corpus:
        path = Path(path)
        passages_file = path / "passages.jsonl"
        if not passages_file.is_file():
            raise UserError(f"corpus not found: {path} (no passages.jsonl); {INGEST_HINT}")
        pages_file = path / "pages.jsonl"
        pages = _group_pages(_read_jsonl(pages_file), pages_file) if pages_file.is_file() else {}
        return cls(path, _passages(_read_jsonl(passages_file), passages_file), pages)

    @cached_property
    def tables(self) -> dict[str, Table]:
        """The header and cells of every table passage, by passage id (empty when none were extracted)."""
        return {table.id: table for table in _tables_file(self.path / "tables.jsonl")}

    @cached_property
    def hash(self) -> str:
        """sha256 over the passages (retriever index caches key on it)."""
        return passages_hash(self.passages)

    @cached_property
    def _by_doc(self) -> dict[str, list[Passage]]:
        grouped: dict[str, list[Passage]] = {}
        for passage in self.passages:
            grouped.setdefault(passage.doc_id, []).append(passage)
        return grouped

    @property
    def doc_ids(self) -> list[str]:
        return list(self._by_doc)

    def on_pages(self, doc_id: str | None, page_indexes) -> list[str]:
        """Ids of the passages of ``doc_id`` covering any of these 0-based page indexes (none for an unknown doc)."""
        wanted = set(page_indexes)
        return [p.id for p in self._by_doc.get(doc_id or "", []) if wanted & set(p.page_indexes)]

    def by_doc(self, doc_id: str) -> list[Passage]:
        """The passages of one document, in order; an unknown id is a UserError naming the corpus."""
        if doc_id not in self._by_doc:
            raise UserError(f"document {doc_id!r} is not in corpus {self.path} ({len(self._by_doc)} documents)")
        return self._by_doc[doc_id]
