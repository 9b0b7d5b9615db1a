"""WordNet 3.0 for nltk (METEOR's synonym stage), built from Debian's packaged data.

Debian's ``wordnet-base`` and ``wordnet-sense-index`` put the WordNet 3.0 database in
``/usr/share/wordnet``. nltk's reader wants the same files in ``<nltk_data>/corpora/wordnet``
plus ``lexnames`` (the table of lexicographer files), which Debian does not ship; ``build``
copies the files and writes that table. Build once (``make install`` does)::

    python -m esgexp.eval.wordnet_data [DEST]      # DEST defaults to <sys.prefix>/nltk_data

At run time ``find_wordnet`` looks where nltk looks (``NLTK_DATA`` first, then its standard
folders, which include ``<sys.prefix>/nltk_data``, the venv's own folder) and in DEFAULT_DEST.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from esgexp.errors import UserError

DEBIAN_DIR = Path("/usr/share/wordnet")
DEFAULT_DEST = Path(sys.prefix) / "nltk_data"
RESOURCE = "corpora/wordnet"

# Every file nltk's WordNetCorpusReader opens, except lexnames (written below).
FILES = (
    "adj.exc",
    "adv.exc",
    "noun.exc",
    "verb.exc",
    "cntlist.rev",
    "index.sense",
    "data.adj",
    "data.adv",
    "data.noun",
    "data.verb",
    "index.adj",
    "index.adv",
    "index.noun",
    "index.verb",
)

# WordNet 3.0 lexicographer files: number, name, syntactic category (1 noun, 2 verb, 3 adj, 4 adv).
LEXNAMES = (
    ("adj.all", 3),
    ("adj.pert", 3),
    ("adv.all", 4),
    ("noun.Tops", 1),
    ("noun.act", 1),
    ("noun.animal", 1),
    ("noun.artifact", 1),
    ("noun.attribute", 1),
    ("noun.body", 1),
    ("noun.cognition", 1),
    ("noun.communication", 1),
    ("noun.event", 1),
    ("noun.feeling", 1),
    ("noun.food", 1),
    ("noun.group", 1),
    ("noun.location", 1),
    ("noun.motive", 1),
    ("noun.object", 1),
    ("noun.person", 1),
    ("noun.phenomenon", 1),
    ("noun.plant", 1),
    ("noun.possession", 1),
    ("noun.process", 1),
    ("noun.quantity", 1),
    ("noun.relation", 1),
    ("noun.shape", 1),
    ("noun.state", 1),
    ("noun.substance", 1),
    ("noun.time", 1),
    ("verb.body", 2),
    ("verb.change", 2),
    ("verb.cognition", 2),
    ("verb.communication", 2),
    ("verb.competition", 2),
    ("verb.consumption", 2),
    ("verb.contact", 2),
    ("verb.creation", 2),
    ("verb.emotion", 2),
    ("verb.motion", 2),
    ("verb.perception", 2),
    ("verb.possession", 2),
    ("verb.social", 2),
    ("verb.stative", 2),
    ("verb.weather", 2),
    ("adj.ppl", 3),
)


def build(dest: Path | str = DEFAULT_DEST, source: Path | str = DEBIAN_DIR) -> Path:
    """Copy the WordNet files from ``source`` into ``dest/corpora/wordnet`` and write lexnames.

    Returns the corpus folder. Raises UserError when ``source`` lacks a file."""
    source = Path(source)
    missing = [name for name in FILES if not (source / name).is_file()]
    if missing:
        raise UserError(
            f"WordNet data missing in {source}: {', '.join(missing)}; "
            "install it with: apt-get install wordnet-base wordnet-sense-index"
        )
    target = Path(dest) / RESOURCE
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(source / name, target / name)
    lines = (f"{number:02d}\t{name}\t{category}\n" for number, (name, category) in enumerate(LEXNAMES))
    (target / "lexnames").write_text("".join(lines), encoding="utf-8")
    return target


def find_wordnet():
    """``(reader, folder)`` for nltk's WordNet, or ``None`` when it is not installed."""
    import nltk

    if str(DEFAULT_DEST) not in nltk.data.path:
        nltk.data.path.append(str(DEFAULT_DEST))
    try:
        folder = nltk.data.find(RESOURCE)
        from nltk.corpus import wordnet

        wordnet.ensure_loaded()
    except (LookupError, OSError):
        return None
    return wordnet, str(folder)


def read(dest: Path | str):
    """nltk's WordNet reader over what ``build`` wrote in ``dest`` (put on nltk's search path,
    which nltk's path check requires of any corpus folder)."""
    import warnings

    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    if str(dest) not in nltk.data.path:
        nltk.data.path.append(str(dest))
    with warnings.catch_warnings():  # no multilingual (OMW) data: expected, not worth a warning
        warnings.simplefilter("ignore", UserWarning)
        return WordNetCorpusReader(str(Path(dest) / RESOURCE), None)


def main(argv: list[str] | None = None) -> None:
    """``python -m esgexp.eval.wordnet_data [DEST]``: build, then check that nltk reads it."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        raise SystemExit("usage: python -m esgexp.eval.wordnet_data [DEST]")
    dest = Path(args[0] if args else DEFAULT_DEST).resolve()
    try:
        folder = build(dest)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    import nltk

    searched = {Path(path).expanduser().resolve() for path in [*nltk.data.path, DEFAULT_DEST]}
    synsets = read(dest).synsets("car")
    print(f"WordNet 3.0 for nltk in {folder} ({len(synsets)} synsets for 'car')")
    if dest not in searched:
        print(f"note: {dest} is not where nltk looks; set NLTK_DATA={dest} when scoring")


if __name__ == "__main__":
    main()
