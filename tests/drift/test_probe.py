"""The probe's framing and its host-side readers, over generated inputs: sections that exit, fail,
change directory or print without a final newline stay apart (the real script, run by a local
``sh``); the agent's section and the driver's CUDA level read as they must for every shape."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.drift import HostProbe, probe
from rigkit.common import gpu
from rigkit.host import modelcheck

#: What a fact's command may do besides printing: leave the script (FolderFiles and NvidiaSmi
#: `exit 0` when their folder or tool is missing), fail, move the working directory, print nothing.
ENDINGS = ("", "; exit 0", "; exit 3", "; false", "; cd /", "; cd /nonexistent-rigkit",
           "; exec 1>&-")
TEXT = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="'\\%"), max_size=30)


def _section(lines: list[str], newline: bool, ending: str) -> str:
    body = "".join(f"printf '%s\\n' '{ln}'; " for ln in lines[:-1])
    if lines:
        body += f"printf '%s{chr(92) + 'n' if newline else ''}' '{lines[-1]}'"
    else:
        body += "true"
    return body + ending


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(TEXT.filter(lambda t: not t.startswith(probe.SECTION)), max_size=3),
                          st.booleans(), st.sampled_from(ENDINGS)), min_size=1, max_size=6))
def test_every_section_is_read_whatever_the_others_do(specs):
    """For all sections: each key is in the output with exactly its own lines (trailing blanks aside),
    whatever the sections before it did (exit, fail, cd, a last line without its newline), and every
    relative read runs in the directory the script started in."""
    sections = [(f"s{i}", _section(lines, newline, ending)) for i, (lines, newline, ending) in enumerate(specs)]
    sections.append(("cwd", "pwd"))
    out = subprocess.run(["sh", "-c", probe.probe_script(sections)], capture_output=True, text=True, cwd="/tmp",
                         timeout=30)
    assert out.returncode == 0
    raw = HostProbe().process(out.stdout.splitlines())
    assert list(raw) == [k for k, _ in sections]
    for i, (lines, _, _) in enumerate(specs):
        got = raw[f"s{i}"]
        while got and not got[-1]:
            got.pop()
        want = list(lines)
        while want and not want[-1]:
            want.pop()
        assert got == want, (i, lines)
    assert raw["cwd"] == ["/tmp"]


def test_a_missing_wheelhouse_and_a_missing_nvidia_smi_do_not_end_the_probe(tmp_path):
    """The deploy's own facts: FolderFiles of a missing folder and NvidiaSmi without the tool `exit 0`;
    the sections after them are still read (they were lost before the sections ran in subshells)."""
    from rigkit.operations.facts.files import FolderFiles
    from rigkit.operations.facts.nvidia import NvidiaSmi

    script = probe.probe_script([("wheels", FolderFiles().command(str(tmp_path / "gone"))),
                                 ("smi", f"PATH={tmp_path}; " + NvidiaSmi().command()),
                                 ("units", "echo Id=llama-swap.service")])
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    raw = HostProbe().process(out)
    assert FolderFiles().process(raw["wheels"]) is None
    assert NvidiaSmi().process(raw["smi"])["state"] != "ok"
    assert raw["units"] == ["Id=llama-swap.service"]


MODELS = st.dictionaries(st.text(alphabet="abcdefgh-", min_size=1, max_size=8), st.lists(TEXT, max_size=2), max_size=3)


@given(st.sampled_from([0, 1, 2, 126, 127]), st.lists(TEXT, max_size=4), MODELS, st.booleans())
def test_the_agent_section_reads_health_and_models_for_every_outcome(rc, noise, models, asked):
    """``rigkit-agent probe``'s section, for all exit statuses and outputs: the exit status is the
    agent's health; models come from its last line only when it ran (exit 0), ``"no-agent"`` when it
    did not, a ``model check failed`` reason when it ran and printed no JSON object; never a crash."""
    body = [ln for ln in ("rigkit-agent 0.1.0 (Python 3.11.2)", *noise) if ln.strip()]
    lines = [*body, json.dumps(models)] if asked else body
    agent, found = probe.parse_agent([*lines, f"{probe.RC}{rc}"], models=asked)
    assert agent["rc"] == rc
    if rc == 0:
        assert agent["output"] == "rigkit-agent 0.1.0 (Python 3.11.2)"
    else:
        assert agent["output"] == "\n".join(ln.rstrip() for ln in lines[-3:]).strip()
    if not asked:
        assert found is None
    elif rc != 0:
        assert found == "no-agent"
    else:
        assert found == models
    # cut short after the version line: the check failed, said so
    agent, found = probe.parse_agent(["rigkit-agent 0.1.0 (Python 3.11.2)", f"{probe.RC}0"], models=True)
    assert found == {"*": ["model check failed: no output"]}
    assert probe.parse_agent([], models=True) == ({"rc": None, "output": ""}, "no-agent")


def test_the_agents_probe_job_prints_its_version_then_the_models_line(tmp_path, monkeypatch):
    """``rigkit-agent probe`` run for real (``python -m rigkit.host``): the version line, then the model
    check's JSON; a check that cannot run at all (no host config here) is the JSON's one reason and
    the agent still exits 0 (its health)."""
    import base64
    import sys

    lock = base64.b64encode(json.dumps({"version": 1, "models": {}}).encode()).decode()
    env = {"RIGKIT_HOST_CONFIG": str(tmp_path / "missing.json"), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-m", "rigkit.host", "probe", lock, "0", ","], capture_output=True,
                       text=True, env=env, cwd=Path(__file__).resolve().parents[2], timeout=60)
    agent, models = probe.parse_agent([*p.stdout.splitlines(), f"{probe.RC}{p.returncode}"], models=True)
    assert p.returncode == 0, p.stderr
    assert agent["output"].startswith("rigkit-agent ")
    assert list(models) == ["*"] and models["*"][0].startswith("model check failed: ")
    assert modelcheck.probe(["too", "few"]) == 0


VERSION = st.tuples(st.integers(1, 99), st.integers(0, 9)).map(lambda v: f"{v[0]}.{v[1]}")


@given(VERSION, st.sampled_from(["{d}", "{d}.04", "{d}.01.02"]), st.integers(1, 30), st.booleans())
def test_the_drivers_cuda_level_is_read_in_both_spellings(cuda, driver, pad, umd):
    """The header of ``nvidia-smi`` before driver 610 (``Driver Version: … CUDA Version: …``) and from
    610 on (``KMD Version: … CUDA UMD Version: …``), any padding, and ``nvidia-smi -q``'s line: the CUDA
    level, never the driver's version."""
    drv = driver.format(d="610.57")
    names = ("KMD Version", "CUDA UMD Version") if umd else ("Driver Version", "CUDA Version")
    header = f"| NVIDIA-SMI {drv}{' ' * pad}{names[0]}: {drv}{' ' * pad}{names[1]}: {cuda}{' ' * pad}|"
    assert gpu.driver_cuda(f"Tue Dec  1 10:00:00 2026\n{'+' + '-' * 40}\n{header}\n") == cuda
    assert gpu.driver_cuda(f"{names[1]}{' ' * pad}: {cuda}\n") == cuda
    assert gpu.driver_cuda(f"| NVIDIA-SMI {drv}  {names[0]}: {drv} |") is None


JSON_LEAF = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
INFO = st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda k: k != "CgroupDriver"),
                       st.recursive(JSON_LEAF, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c,
                                                                                                   max_size=3), max_leaves=6),
                       max_size=6)


@given(INFO, st.sampled_from(["cgroupfs", "systemd", " systemd ", "", None, 7]), st.sampled_from([0, 2, None]))
def test_dockers_cgroup_driver_is_read_from_its_info_answer(info, driver, indent):
    """dockerd's ``GET /info`` answer (Docker Engine API "System information": one JSON object, its
    ``CgroupDriver`` a string, what ``docker info --format '{{.CgroupDriver}}'`` prints), whatever else it
    holds and however it is laid out: the driver; no answer, one that is not a JSON object, or no
    non-empty string there: None (the comparison then has nothing to say, as when docker is down)."""
    if driver is not None:
        info = {**info, "CgroupDriver": driver}
    lines = json.dumps(info, indent=indent).split("\n")
    want = driver.strip() or None if isinstance(driver, str) else None
    assert probe.docker_cgroup_driver(lines) == want
    assert probe.docker_cgroup_driver([]) is None
    assert probe.docker_cgroup_driver(["curl: (7) Failed to connect"]) is None
    assert probe.docker_cgroup_driver([json.dumps([info])]) is None
