"""The user crontab reader a window warns with (rigkit/host/crontab.py, issue 63): a real crontab
(``lived_in`` in data/owner_corpus.json) read as cronie reads it, and properties over generated
lines: a comment, an environment line or a short line is never an entry; an entry's command is what
follows its time fields up to an unescaped ``%``; a call is found exactly when the command names
the port on a local address."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.host import crontab

CORPUS = json.loads((Path(__file__).parent / "data" / "owner_corpus.json").read_text())


def corpus_crontab() -> dict:
    """The corpus crontab as the lived-in host holds it: the real file and the one line added."""
    e = next(e for e in CORPUS["lived_in"] if e["role"] == "crontab")
    return {**e, "text": e["text"] + e["adapted_append"]}


def test_the_operators_real_crontab_reads_as_cronie_reads_it():
    e = corpus_crontab()
    cmds = list(crontab.commands(e["text"]))
    # SHELL= and PATH= are environment lines; the four entries of the real file, then the proxy line
    assert [n for n, _ in cmds] == [4, 5, 6, 7, 8]
    assert cmds[0][1] == "/usr/bin/ruby /home/cron/code/cron-scripts/check_maestral_working.rb"
    assert crontab.calls_to(e["text"], 8080) == [cmds[-1]]
    assert crontab.calls_to(e["text"], 18020) == []


def test_proxy_callers_names_the_user_file_and_line(tmp_path):
    e = corpus_crontab()
    (tmp_path / "rig").write_text(e["text"])
    (tmp_path / "root").write_text("# nothing\n")
    (found,) = crontab.proxy_callers(8080, tmp_path)
    assert found.startswith(f"rig's crontab ({tmp_path / 'rig'}) line 8: ") and "127.0.0.1:8080" in found
    assert crontab.proxy_callers(8080, tmp_path / "missing") == []


_time = st.sampled_from(["*", "0", "*/5", "1-5", "0,30", "@hourly", "@reboot"])
_word = st.text(alphabet="abcdefghij/._-", min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["comment", "env", "quoted env", "short", "entry"]), t=_time, words=st.lists(_word, min_size=1, max_size=4),
       port=st.sampled_from([8080, 18020]), host=st.sampled_from(["localhost", "127.0.0.1", "[::1]", "0.0.0.0", "10.0.0.2", "example.org"]),
       stdin=st.booleans(), indent=st.sampled_from(["", " ", "\t"]))
def test_every_generated_line_is_read_as_cronie_reads_it(kind, t, words, port, host, stdin, indent):
    url = f"http://{host}:{port}/v1/models"
    cmd = " ".join([*words, "curl", "-s", url])
    timing = t if t.startswith("@") else f"{t} * * * *"
    line = {"comment": f"#{timing} {cmd}", "env": f"URL = {url}", "quoted env": f"'URL'={url}", "short": "0 3 * *",
            "entry": f"{timing} {cmd}" + ("%input for stdin" if stdin else "")}[kind]
    got = list(crontab.commands(indent + line + "\n"))
    if kind != "entry":
        assert got == []
        return
    assert got == [(1, cmd)]
    local = host in ("localhost", "127.0.0.1", "[::1]", "0.0.0.0")
    assert bool(crontab.calls_to(line, 8080)) == (local and port == 8080)
    assert crontab.calls_to(line.replace(":8080", ":80800"), 8080) == []  # another port, not a prefix of it
