"""Extending mdsd: a verifier, a draft source and a depth policy, each one new file of a user's own, work from
the API, ``mdsd decode`` and an experiment's method spec with no other edit (``$MDSD_PLUGINS`` names them).

Each plugin module registers itself when imported; the runs happen in fresh processes, with the plugins'
folder on ``PYTHONPATH``, so nothing registered here leaks into other tests.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tiny_lms import word_pair

ROOT = Path(__file__).resolve().parents[1]

PLUGINS = {
    "my_verifier.py": '''
        """RRS under another name: a verifier of one's own."""
        from mdsd.verifiers.registry import register
        from mdsd.verifiers.rrs import RRSVerifier


        @register
        class MyVerifier(RRSVerifier):
            name = "my-rrs"
        ''',
    "my_source.py": '''
        """A source that proposes the context's last two tokens again."""
        from mdsd.sources import Continuation, Source, register_source


        @register_source
        class Repeat(Source):
            name = "repeat"
            key = "repeat"

            def propose(self, context, width, depth):
                return [Continuation(tuple(context[-2:])[:depth], 1.0)] if len(context) >= 2 else []
        ''',
    "my_policy.py": '''
        """Draft one level less than the tree, always."""
        import numpy as np

        from mdsd.tree.adaptive import DepthPolicy, register_policy


        @register_policy
        class OneLess(DepthPolicy):
            key = "one-less"

            def start(self, rows, max_depth):
                return np.full(rows, max(max_depth - 1, 1), dtype=np.int64)

            def update(self, depth, accepted, max_depth):
                return self.start(len(depth), max_depth)
        ''',
}
METHOD = "chain:3/my-rrs/one-less+repeat"


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugins")
    for name, text in PLUGINS.items():
        (folder / name).write_text(textwrap.dedent(text))
    env = dict(os.environ, MDSD_PLUGINS="my_verifier,my_source,my_policy", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    return env


def _run(command: list[str], env: dict, cwd: Path = ROOT) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_new_names_without_the_plugins_are_refused():
    from mdsd.tree.spec import parse_method

    with pytest.raises(ValueError, match="unknown verifier 'my-rrs'"):
        parse_method(METHOD)


def test_the_api_finds_the_plugins(plugins):
    script = f"""
        import torch, mdsd
        from mdsd.tree.spec import parse_method
        from tiny_lms import tiny_lm, perturbed
        target = tiny_lm(0, vocab=16)
        dec = mdsd.TreeDecoder.from_method(target, perturbed(target, 0.3, seed=1), {METHOD!r}, 0.7)
        assert type(dec.verifiers[1]).__name__ in ("MyVerifier", "SingleVerifier"), dec.verifiers
        assert type(dec.depth_policy).__name__ == "OneLess" and dec.source.name == "repeat"
        out = dec.generate(torch.tensor([[3, 4, 3, 4, 3]]), 12, torch.Generator().manual_seed(0))
        assert len(out.tokens) == 12 and set(out.depth_per_step) == {{2}}, out.depth_per_step
        print("retrieved", sum(out.retrieved_per_step))
        """
    printed = _run([sys.executable, "-c", textwrap.dedent(script)], plugins)
    assert printed.startswith("retrieved")


def test_mdsd_decode_finds_the_plugins(plugins, tmp_path):
    target, draft = word_pair(tmp_path)
    mdsd = str(Path(sys.executable).parent / "mdsd")  # the console script of this environment
    command = [mdsd, "decode", "--target", str(target), "--draft", str(draft)]
    command += ["--tree", "chain:3", "--verifier", "my-rrs", "--adaptive", "one-less", "--source", "repeat"]
    command += ["--temperature", "0.7", "--prompt", "the cat the cat", "--max-new-tokens", "8"]
    printed = _run(command, plugins)
    assert "1 prompt(s), my-rrs, chain:3/one-less+repeat" in printed, printed


@pytest.mark.slow
def test_an_experiments_method_spec_finds_the_plugins(plugins, tmp_path):
    command = [sys.executable, str(ROOT / "experiments" / "batch_efficiency.py"), "--quick"]
    command += ["--output-dir", str(tmp_path), "--max-new-tokens", "6", "--methods", METHOD]
    _run(command, plugins, cwd=tmp_path)
    rows = json.loads((tmp_path / "batch_efficiency.json").read_text())["rows"]
    assert [r["method"] for r in rows] == [METHOD] and rows[0]["tokens"] == 4 * 6
