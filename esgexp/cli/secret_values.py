"""API keys on the command line: refused before any file is written, and never echoed.

Every console command calls ``refuse_secrets(config, args)`` on its command line before Hydra runs (so
before a run folder, ``.hydra/*.yaml`` or a log exists). A value that looks like a key is a UserError that
shows it redacted (``sk-proj-…redacted``) and names the environment variable to put it in; one given for a
URL (``backend.base_url=sk-...``) is also told that the setting takes a URL. ``redacted`` hides such values
in any other message.

What looks like a key: ``sk-`` (``sk-proj-``, ``sk-ant-``) or ``hf_`` followed by a part of 16 or more
letters and digits that mixes two of upper case, lower case and digits; or a word of 32 or more letters,
digits, ``-`` and ``_`` with upper case, lower case and digits that changes between them at 40% or more
of its letters, as random text does (``ExperimentRunNumber20240101...`` does not). Hex digests, MLflow
run ids (lower-case hex), paths and URLs (``/``, ``.``) pass.
"""

from __future__ import annotations

import re
from itertools import pairwise

from esgexp.errors import UserError

PREFIXED = re.compile(r"(?<![A-Za-z0-9_-])(?:sk-|hf_)[A-Za-z0-9_-]+")
SHOWN_PREFIX = re.compile(r"sk-(?:proj-|ant-)?|hf_")
WORD = re.compile(r"[^\s,:;=()\[\]{}'\"]+")  # a value's parts between the override grammar's punctuation
SEPARATORS = re.compile(r"[-_]")
GENERIC_LENGTH = 32
PREFIXED_PART = 16
MIN_CLASS_CHANGES = 0.4
# The variable a key of each kind usually goes in, when the config names none.
USUAL_VARIABLE = {"sk-ant-": "ANTHROPIC_API_KEY", "hf_": "HF_TOKEN", "sk-": "OPENAI_API_KEY"}


def _classes(text: str) -> list[str]:
    return ["u" if c.isupper() else "l" if c.islower() else "d" for c in text]


def _prefixed_key(text: str) -> bool:
    """Whether a ``sk-``/``hf_`` match holds a long part mixing upper case, lower case or digits."""
    return any(len(part) >= PREFIXED_PART and len(set(_classes(part))) >= 2 for part in SEPARATORS.split(text[3:]))


def _random_word(word: str) -> bool:
    """Whether ``word`` is long, mixes upper case, lower case and digits, and changes between them often."""
    if len(word) < GENERIC_LENGTH or not re.fullmatch(r"[A-Za-z0-9_-]+", word):
        return False
    classes = _classes(SEPARATORS.sub("", word))
    if len(set(classes)) < 3:
        return False
    changes = sum(a != b for a, b in pairwise(classes))
    return changes >= MIN_CLASS_CHANGES * (len(classes) - 1)


def secrets_in(text: str) -> list[str]:
    """The parts of ``text`` (an argument, a value) that look like keys."""
    found = [m.group() for m in PREFIXED.finditer(text) if _prefixed_key(m.group())]
    found += [w for w in WORD.findall(text) if _random_word(w) and not any(w in f or f in w for f in found)]
    return found


def redact(secret: str) -> str:
    """``sk-proj-…redacted``: a key's kind, never its characters."""
    prefix = SHOWN_PREFIX.match(secret)
    return f"{prefix.group() if prefix else ''}…redacted"


def redacted(text: str) -> str:
    """``text`` with every part that looks like a key redacted."""
    for secret in secrets_in(text):
        text = text.replace(secret, redact(secret))
    return text


def usual_variable(secret: str) -> str:
    return next((name for prefix, name in USUAL_VARIABLE.items() if secret.startswith(prefix)), "OPENAI_API_KEY")


def variable_setting(key: str) -> str | None:
    """The setting that names ``key``'s environment variable: ``key`` itself (``*_env``), ``KEY_env`` for a
    ``*api_key``/``*token`` key, else None."""
    if key.endswith("_env"):
        return key
    return f"{key}_env" if key.endswith(("api_key", "token")) else None


def configured_variable(config: str, overrides: list[str], setting: str) -> str | None:
    """The variable ``setting`` names in ``config`` composed with the plain ``overrides``; None if none."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from esgexp.core.config import compose_config

    plain = [o for o in overrides if "=" in o and not o.startswith(("-", "hydra")) and "," not in o]
    for attempt in (plain, []):
        GlobalHydra.instance().clear()
        try:
            value = OmegaConf.select(compose_config(config, attempt), setting, default=None)
        except Exception:
            continue
        return value if isinstance(value, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) else None
    return None


def refusal(argument: str, secret: str, config: str, overrides: list[str]) -> str:
    """Why ``argument`` (holding ``secret``) is refused, with the key redacted and where it belongs."""
    key = argument.split("=", 1)[0].lstrip("+~") if "=" in argument else ""
    if key.endswith("url") and "://" not in argument:
        return url_refusal(key, secret, config, overrides)
    what = f"{key}: a setting value" if key else "an argument"
    general = f"{what} looks like a secret key ({redact(secret)}): esgexp never writes keys to disk"
    setting = variable_setting(key)
    if setting is None:
        return f"{general}; set it in the environment variable the setting names"
    variable = configured_variable(config, overrides, setting) or usual_variable(secret)
    return (
        f"{general}. {setting} names an environment variable (e.g. {variable}); put the key in that "
        f"variable: export {variable}=... (and {setting}={variable})"
    )


def url_refusal(key: str, secret: str, config: str, overrides: list[str]) -> str:
    """A key given where an address belongs (``backend.base_url=sk-...``): the setting takes a URL, and the
    key goes in the variable that the sibling ``api_key_env`` setting names."""
    parent = key.rpartition(".")[0]
    setting = f"{parent}.api_key_env" if parent else "api_key_env"
    variable = configured_variable(config, overrides, setting) or usual_variable(secret)
    return (
        f"{key} must be a URL (http(s)://host:port/v1), and what was given looks like an API key "
        f"({redact(secret)}): esgexp never writes keys to disk. A key goes in an environment variable that "
        f"{setting} names: export {variable}=... (and {setting}={variable})"
    )


def refuse_secrets(config: str, args: list[str]) -> None:
    """Raise one UserError when any of a command's ``args`` holds a value that looks like a key."""
    clean = [a for a in args if not secrets_in(a)]
    found = [refusal(a, s, config, clean) for a in args for s in secrets_in(a)[:1]]
    if found:
        raise UserError("; ".join(found))
