"""``substitute_env``'s scan for ``${env.NAME}`` (``rigkit/spec/llama_swap_load.py``): the names are found
in the comment-free text as llama-swap's ``substituteEnvMacros`` finds them (macros.go:452-514). The scan
dumps the loaded document with libyaml's emitter where PyYAML has it, for speed (issue #28's 120 kB line);
these properties hold it to the pure-Python emitter it replaced: over generated documents — macros in keys,
values, lists, quoted and block scalars and in comments (which must not count), beside characters outside
the BMP (libyaml escapes them), quotes, colons and long values — both dumpers give the same result: the same
substituted text, or the same refusal.
"""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.spec import llama_swap_load
from rigkit.spec.llama_swap_load import LoadError, substitute_env

NAMES = st.sampled_from(["HF_TOKEN", "A", "_x9", "MODEL_DIR", "UNSET_ONE"])
MACRO = NAMES.map(lambda n: "${env.%s}" % n)
# Text around a macro: ASCII words and YAML's own punctuation, characters outside the BMP, quotes.
PIECE = st.one_of(MACRO, st.text(min_size=0, max_size=12),
                  st.text(alphabet="ab :#'\"-{}[],&*!|>%@`$.\\", max_size=8),
                  st.sampled_from(["\U0001F600", "\U000aeaf2", "é", "${env.}", "${env.9x}", "$env.A", "${ENV.A}"]))
VALUE = st.lists(PIECE, min_size=1, max_size=5).map("".join)


def _document(entries: list[tuple[str, object]], comment: str) -> str:
    """A llama-swap-like document: ``models`` with one member per entry, a comment holding ``comment``."""
    doc = {"models": {f"m{i}": ({"cmd": v} if isinstance(v, str) else {"cmd": "x", "env": v})
                      for i, (_, v) in enumerate(entries)}}
    return f"# {comment}\n" + yaml.safe_dump(doc, allow_unicode=True, width=1 << 30)


def _outcome(text: str, environ: dict[str, str], dumper: type) -> tuple[str, str]:
    """``("ok", substituted text)`` or ``("refused", message)`` with ``dumper`` as the scan's emitter."""
    saved = llama_swap_load._SCAN_DUMPER
    llama_swap_load._SCAN_DUMPER = dumper
    try:
        return "ok", substitute_env(text, environ)
    except LoadError as exc:
        return "refused", str(exc)
    finally:
        llama_swap_load._SCAN_DUMPER = saved


ENVIRON = {"HF_TOKEN": "secret\"\\value", "A": "a", "_x9": "\U0001F600", "MODEL_DIR": "/srv/models"}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.just(""), st.one_of(VALUE, st.lists(VALUE, max_size=3))), min_size=1, max_size=4),
       VALUE)
def test_the_scan_finds_the_same_names_with_either_emitter(entries, comment):
    text = _document(entries, comment)
    assert _outcome(text, ENVIRON, yaml.SafeDumper) == _outcome(text, ENVIRON, llama_swap_load._SCAN_DUMPER)


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\ufeff\u2028\u2029\x85")))
def test_a_macro_only_in_a_comment_is_not_substituted_nor_required(comment):
    """A comment YAML can read (no control characters: a document that does not parse is scanned raw,
    comments and all, as upstream scans it)."""
    text = f"# {comment} ${{env.UNSET_ONE}}\nmodels: {{}}\n"
    kind, result = _outcome(text, {}, llama_swap_load._SCAN_DUMPER)
    assert kind == "ok" and result == text


def test_the_scan_uses_libyaml_where_pyyaml_has_it():
    assert llama_swap_load._SCAN_DUMPER is (yaml.CSafeDumper if yaml.__with_libyaml__ else yaml.SafeDumper)


def test_an_unset_macro_in_a_value_is_refused_by_name():
    kind, message = _outcome("models:\n  m:\n    cmd: run ${env.UNSET_ONE}\n", ENVIRON, llama_swap_load._SCAN_DUMPER)
    assert kind == "refused" and "'UNSET_ONE' is not set" in message
