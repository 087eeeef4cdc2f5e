"""What a well-known API key looks like, to refuse one pasted where flightdeck keeps text on disk
(a command route's argv, stored with the batch for `resume`)."""

from __future__ import annotations

import re

# Prefixed shapes only, so ordinary arguments (flags, paths, `{goal}`, `-c key=value`) never
# match: `sk-` then 32 or more token characters, digits, capitals and small letters among them
# as a random key has ("sk-some-long-hyphenated-name" or a path's "sk-learn-model-2024-final"
# is no key), covers OpenAI's `sk-`, `sk-proj-`, `sk-svcacct-` and Anthropic's `sk-ant-api03-`,
# `sk-ant-oat01-`; Groq's `gsk_` and xAI's `xai-` alike (40 or more); GitHub's `ghp_` (and
# gho_, ghu_, ghs_, ghr_) and `github_pat_` tokens; Google's `AIza` and 35 more; Hugging Face's
# `hf_` and `api_org_` and 34 letters, capitals and small ones among them. Not inside a word:
# "desk-…" or "task-sk-…" starts no key.
_TOKEN = "[A-Za-z0-9_-]"
_ALNUM = "[A-Za-z0-9]"
_KEY = re.compile(
    r"(?<![A-Za-z0-9_-])"
    rf"(?:sk-(?={_TOKEN}*[0-9])(?={_TOKEN}*[A-Z])(?={_TOKEN}*[a-z]){_TOKEN}{{32,}}"
    rf"|(?:gsk_|xai-)(?={_ALNUM}*[0-9])(?={_ALNUM}*[A-Z])(?={_ALNUM}*[a-z]){_ALNUM}{{40,}}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}"
    r"|github_pat_[A-Za-z0-9_]{22,}"
    r"|AIza[A-Za-z0-9_-]{35}"
    r"|(?:hf_|api_org_)(?=[A-Za-z]*[A-Z])(?=[A-Za-z]*[a-z])[A-Za-z]{34})"
)

KEY_IN_ARGV = (
    "looks like an API key (not shown): flightdeck keeps a route's argv with the batch, on "
    "disk, for resume; put the key in an environment variable instead and name it in "
    "api_key_env (or env_pass), which the CLI reads"
)


def looks_like_key(text: str) -> bool:
    """Whether `text` holds a well-known API key: whole, after `--api-key=`, or inside a longer
    string (`Authorization: Bearer sk-…`)."""
    return _KEY.search(text) is not None
