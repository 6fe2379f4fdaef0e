"""`--model ORG/NAME`: a model's config.json from the Hugging Face Hub, through huggingface_hub's own cache.

huggingface_hub is the library that owns the cache's layout (models--ORG--NAME/snapshots/<revision>/...), the
offline switch (HF_HUB_OFFLINE=1: the cache alone, no request) and the cache's location (HF_HOME, HF_HUB_CACHE):
reading the cache with code of our own would re-implement all three. Only config.json is fetched, never weights.
"""

from __future__ import annotations

import os
import re

from symmem.errors import SymmemError

# a Hub repository id: one owner, one name (huggingface_hub's validate_repo_id: letters, digits, '-', '_', '.')
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def is_repo_id(name: str) -> bool:
    """Whether `name` reads as ORG/NAME and names no file here (a path wins)."""
    return (REPO_ID.fullmatch(name) is not None and not name.endswith(".json") and ".." not in name
            and not os.path.lexists(name))


def config_json(repo_id: str, field: str = "model") -> tuple[str, str]:
    """(path, source) of `repo_id`'s config.json: from the cache, or downloaded when the Hub can be reached."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError:  # pragma: no cover - a dependency of symmem
        raise SymmemError(f"{field} = {repo_id!r}: reading a Hub model needs huggingface_hub "
                          "(pip install huggingface_hub)") from None
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import logging as hub_logging

    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        return cached, repo_id
    missing = (f"{field} = {repo_id!r}: its config.json is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
               "and {why}; download it where there is a network (huggingface-cli download " + repo_id +
               " config.json) or give the file's path")
    if constants.HF_HUB_OFFLINE:
        raise SymmemError(missing.format(why="HF_HUB_OFFLINE is set"))
    if not _reachable(constants.ENDPOINT):  # fail in seconds, not after huggingface_hub's retries
        raise SymmemError(missing.format(why=f"{constants.ENDPOINT} cannot be reached"))
    hub_logging.set_verbosity_error()  # its retry warnings are not the user's business: one line says what failed
    try:
        return hf_hub_download(repo_id, "config.json"), repo_id
    except LocalEntryNotFoundError:
        raise SymmemError(missing.format(why="the Hub cannot be reached")) from None
    except GatedRepoError:
        raise SymmemError(f"{field} = {repo_id!r}: a gated repository: accept its terms and log in "
                          "(huggingface-cli login), or give the config.json's path") from None
    except RepositoryNotFoundError:
        raise SymmemError(f"{field} = {repo_id!r}: no such repository on the Hugging Face Hub (or it is private)"
                          ) from None
    except EntryNotFoundError:
        raise SymmemError(f"{field} = {repo_id!r}: the repository has no config.json") from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise SymmemError(f"{field} = {repo_id!r}: the Hugging Face Hub did not answer: "
                          f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}") from None


def _reachable(endpoint: str, timeout: float = 5.0) -> bool:
    """Whether a TCP connection to the Hub's host opens within `timeout` seconds."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False
