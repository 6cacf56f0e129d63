"""How to add an optional extra (``verify``, ``plot``, ``tokens``) to this installation.

decodecalc is installed from a clone (``pip install .`` or ``pip install -e .``), not from a package index, so
``pip install 'decodecalc[verify]'`` would find nothing. pip records where an installation came from
(``direct_url.json``, PEP 610); the hint names that folder when it is known.
"""

from __future__ import annotations


def _source_dir() -> str | None:
    """The folder decodecalc was installed from, if pip recorded a local one (imports stay here: the CLI's start-up
    imports this module)."""
    import json
    from urllib.parse import unquote, urlparse

    try:
        from importlib.metadata import PackageNotFoundError, distribution

        text = distribution("decodecalc").read_text("direct_url.json")
    except (ImportError, PackageNotFoundError, OSError):
        return None
    if not text:
        return None
    try:
        url = urlparse(json.loads(text).get("url", ""))
    except (ValueError, AttributeError):
        return None
    return unquote(url.path) if url.scheme == "file" and url.path else None


def install_hint(extra: str) -> str:
    """``pip install '<where decodecalc came from>[extra]'``: the clone's folder when pip recorded it, else the
    form to run from the clone."""
    source = _source_dir()
    if source is not None:
        return f"pip install '{source}[{extra}]'"
    return f"pip install '.[{extra}]' (from the decodecalc clone)"
