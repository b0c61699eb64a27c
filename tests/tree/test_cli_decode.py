"""``mdsd decode`` end to end on a tiny local pair saved with its tokenizer."""

import json
import resource
import subprocess
import sys

import pytest
import torch
from tiny_lms import word_pair

from mdsd import Tree
from mdsd.cli import main
from mdsd.tree.spec import parse_tree


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return word_pair(tmp_path_factory.mktemp("pair"))


def test_decode_prints_text_and_tokens_per_step(model_dirs, tmp_path, capsys):
    target, draft = model_dirs
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat sat\n\na dog ran\n")
    code = main(
        [
            "decode",
            "--target",
            str(target),
            "--draft",
            str(draft),
            "--tree",
            "binary:2",
            "--verifier",
            "spechub",
        ]
        + ["--temperature", "0.6", "--prompts-file", str(prompts), "--max-new-tokens", "6"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("tokens per step:") == 2 and "--- prompt 1: a dog ran" in out
    assert "2 prompt(s), spechub, binary:2: 12 tokens from" in out and "tokens/s (draft" in out
    for line in out.splitlines():
        if line.startswith("tokens per step:"):  # the list sums to the tokens reported beside it
            counts = json.loads(line.split(": ", 1)[1].split(" (")[0])
            assert f"({sum(counts)} tokens in {len(counts)} steps" in line


def test_decode_greedy_with_a_json_tree(model_dirs, tmp_path, capsys):
    target, draft = model_dirs
    tree_file = tmp_path / "tree.json"
    tree_file.write_text(Tree.sequoia([0.6, 0.2], budget=5, max_depth=3).to_json())
    code = main(
        ["decode", "--target", str(target), "--draft", str(draft), "--tree", str(tree_file)]
        + ["--verifier", "rrs", "--temperature", "0", "--prompt", "the cat", "--max-new-tokens", "5"]
    )
    assert code == 0 and "tokens per step:" in capsys.readouterr().out


def test_decode_bad_input_is_one_line_error(model_dirs, capsys):
    target, draft = model_dirs
    base = ["decode", "--target", str(target), "--draft", str(draft), "--prompt", "the cat"]
    assert main([*base, "--tree", "kary:3", "--verifier", "spechub"]) == 2
    assert "too wide for verifier 'spechub'" in capsys.readouterr().err
    assert main([*base, "--tree", "star:3"]) == 2
    assert "--tree must be" in capsys.readouterr().err
    assert main(["decode", "--target", str(target), "--prompt", "x"]) == 2
    assert main([*base, "--max-new-tokens", "0"]) == 2
    assert "max_new_tokens" in capsys.readouterr().err


def test_parse_tree():
    assert parse_tree("chain:3") == Tree.chain(3)
    assert parse_tree("binary:4").size == 30
    assert parse_tree("kary:2,2,1") == Tree.kary([2, 2, 1])
    with pytest.raises(ValueError, match="--tree"):
        parse_tree("kary:2,x")
    assert json.loads(parse_tree("binary:1").to_json())["parents"] == [0, 0]


def test_decode_a_batch_file_with_a_dynamic_adaptive_tree(model_dirs, tmp_path, capsys):
    target, draft = model_dirs
    prompts = tmp_path / "batch.txt"
    prompts.write_text("the cat sat on a mat\na dog\nthe mat\n")
    args = ["decode", "--target", str(target), "--draft", str(draft), "--batch-file", str(prompts)]
    code = main([*args, "--tree", "dynamic:3,2,2,4", "--adaptive", "grow", "--verifier", "rrsw"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("--- prompt") == 3
    assert "3 prompt(s), rrsw, dynamic:3,2,2,4/grow: 192 tokens" in out


@pytest.mark.parametrize("name", ["optimal:wor", "optimal-wor", "traversal"])
def test_decode_takes_a_verifier_with_its_law_and_the_path_rules(model_dirs, capsys, name):
    target, draft = model_dirs
    args = ["decode", "--target", str(target), "--draft", str(draft), "--tree", "binary:2"]
    code = main(
        [*args, "--verifier", name, "--temperature", "0.6", "--prompt", "the cat", "--max-new-tokens", "4"]
    )
    assert code == 0 and f"1 prompt(s), {name}, binary:2: 4 tokens from" in capsys.readouterr().out


def test_decode_checks_the_verifier_before_loading_models(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    code = main(
        ["decode", "--target", str(missing), "--draft", str(missing), "--verifier", "nope", "--prompt", "x"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--verifier: unknown verifier 'nope'; choose one of" in err and "optimal:wor" in err


def test_decode_names_an_unknown_law_regression_too_wide(tmp_path, capsys):
    """Bug: --verifier optimal:foo said the tree was "too wide for verifier 'optimal:foo'"; the law name
    is the problem, and it is found before any model is loaded."""
    missing = tmp_path / "nowhere"
    args = ["decode", "--target", str(missing), "--draft", str(missing), "--prompt", "x", "--verifier"]
    for name, says in (
        ("optimal:foo", "unknown draft law 'foo'; 'optimal' takes iid, wor"),
        ("rrs:wor", "'rrs' has a fixed draft law"),
    ):
        assert main([*args, name]) == 2
        err = capsys.readouterr().err
        assert says in err and "too wide" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("binary:-1", "D must be an integer >= 1, got '-1'"),
        ("binary:0", "D must be an integer >= 1, got '0'"),
        ("chain:0", "N must be an integer >= 1, got '0'"),
        ("kary:2,0", "every b must be an integer >= 1, got '0'"),
        ("dynamic:3,0,2", "each of DEPTH,K,EXPAND[,BUDGET] must be an integer >= 1"),
        ("chain:2,3", "chain takes one number"),
    ],
)
def test_decode_refuses_a_tree_that_drafts_nothing_regression_binary_minus_one(tmp_path, capsys, spec, says):
    """Bug: --tree binary:-1, binary:0 and chain:0 were accepted and decoded one token per step, labelled
    "binary:-1"."""
    missing = tmp_path / "nowhere"
    code = main(
        ["decode", "--target", str(missing), "--draft", str(missing), "--prompt", "x", "--tree", spec]
    )
    err = capsys.readouterr().err
    assert code == 2 and says in err and err.count("\n") == 1


def test_decode_on_a_device_torch_cannot_use_is_one_line_regression_cuda_traceback(model_dirs, capsys):
    """Bug: --device cuda on a CPU-only torch printed a 34-line traceback ("Torch not compiled with CUDA
    enabled"). Now one line, before any model is loaded; so for a device name torch does not know."""
    target, draft = model_dirs
    args = ["decode", "--target", str(target), "--draft", str(draft), "--prompt", "the cat", "--device"]
    for device, says in (("gpu", "--device must be a torch device"), ("cuda:99", "--device 'cuda:99'")):
        if device.startswith("cuda") and torch.cuda.device_count() > 99:
            continue
        assert main([*args, device]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1
    base = [
        "decode",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompt",
        "the cat",
        "--dtype",
        "int8",
    ]
    assert main(base) == 2 and "--dtype must name a torch floating dtype" in capsys.readouterr().err


def test_a_model_folder_without_a_tokenizer_is_named(model_dirs, tmp_path, capsys):
    target, draft = model_dirs
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((target / "config.json").read_text())
    code = main(["decode", "--target", str(bare), "--draft", str(draft), "--prompt", "the cat"])
    assert code == 2 and "holds a model but no tokenizer" in capsys.readouterr().err


def test_decode_on_the_fast_path_gives_the_eager_paths_greedy_text(model_dirs, capsys):
    target, draft = model_dirs
    common = ["decode", "--target", str(target), "--draft", str(draft), "--tree", "binary:2"]
    common += ["--temperature", "0", "--prompt", "the cat sat", "--max-new-tokens", "8"]
    texts = []
    for extra in ([], ["--compile", "none"]):
        assert main(common + extra) == 0
        texts.append(capsys.readouterr().out.split("--- prompt 0: the cat sat\n", 1)[1].split("\n", 1)[0])
    assert texts[0] == texts[1] and texts[0]


def test_decode_on_the_fast_path_refuses_a_verifier_that_reads_values_back_in_one_line(model_dirs, capsys):
    """optimal:wor solves a flow or its Luce rule on the host: --compile names the eager path, exit 2."""
    target, draft = model_dirs
    code = main(
        ["decode", "--target", str(target), "--draft", str(draft), "--tree", "binary:2", "--prompt", "a"]
        + ["--verifier", "optimal:wor", "--temperature", "0.7", "--compile", "none"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "reads values back" in err.splitlines()[-1] and "compile=False" in err.splitlines()[-1]


def test_decode_refuses_an_unknown_compile_backend_before_loading(model_dirs, capsys):
    target, draft = model_dirs
    code = main(
        ["decode", "--target", str(target), "--draft", str(draft), "--prompt", "a", "--compile", "fast"]
    )
    assert code == 2 and "--compile" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["binary:16", "binary:30"])
def test_decode_refuses_a_tree_that_cannot_fit_regression_oom_kill(model_dirs, spec):
    """Bug: --tree binary:30 was killed by the kernel's OOM killer with no message (23 GB resident), and
    binary:16 under a 6 GB limit ended in a traceback. Now, under a 6 GB address-space limit, one line
    with the estimate and the limit, before the tree is built or a model loaded."""
    target, draft = model_dirs
    six_gb = 6 * 10**9

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (six_gb, six_gb))

    command = [sys.executable, "-m", "mdsd", "decode", "--target", str(target), "--draft", str(draft)]
    command += ["--prompt", "the cat", "--max-new-tokens", "4", "--tree", spec]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and f"--tree {spec} needs about" in done.stderr
    assert "masks" in done.stderr and "more than the" in done.stderr


def _greedy_text(out: str) -> list[str]:
    """The decoded texts of ``mdsd decode``'s output (the line after each ``--- prompt`` header)."""
    lines = out.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line.startswith("--- prompt")]


@pytest.mark.parametrize("compile", ["false", "none"])
def test_decode_with_a_source_alone_gives_the_targets_greedy_tokens(model_dirs, tmp_path, capsys, compile):
    """--tree none: no draft model (the target alone is enough). Without a source that is autoregressive
    decoding, one token per target forward; with prompt lookup, greedy decoding still gives exactly the
    target's greedy tokens (the drafts only decide how many a forward yields), and repetitive prompts get
    more than one token a forward. A dictionary and both sources in priority order give them too."""
    target, _ = model_dirs
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat sat on the cat sat on the\na dog ran far and a dog ran far and a\n")
    base = ["decode", "--target", str(target), "--tree", "none", "--temperature", "0", "--compile", compile]
    base += ["--prompts-file", str(prompts), "--max-new-tokens", "12"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "2 prompt(s), none: 24 tokens from 24 target forwards = 1.000 tokens per target forward" in out
    reference = _greedy_text(out)
    for source in ("lookup", "dictionary", "lookup,dictionary"):
        assert main([*base, "--source", source, "--retrieve", "2", "4"]) == 0
        out = capsys.readouterr().out
        assert _greedy_text(out) == reference, source
        assert f"2 prompt(s), none+{source} 2x4: 24 tokens from" in out  # no verifier named: none is used
    forwards = int(out.split("24 tokens from ")[1].split(" target")[0])
    assert forwards < 24  # prompt lookup's chains were accepted


def test_decode_with_a_source_beside_a_tree(model_dirs, capsys):
    target, draft = model_dirs
    base = ["decode", "--target", str(target), "--draft", str(draft), "--temperature", "0.6"]
    args = [*base, "--tree", "chain:2", "--verifier", "single", "--source", "lookup"]
    args += ["--prompt", "the cat the cat the", "--max-new-tokens", "6"]
    assert main(args) == 0
    assert "1 prompt(s), single, chain:2+lookup 1x8: 6 tokens from" in capsys.readouterr().out
    assert main([*args, "--adaptive", "first"]) == 0
    assert "1 prompt(s), single, chain:2/first+lookup 1x8: 6 tokens from" in capsys.readouterr().out
    assert main([*args, "--adaptive", "first:2:3"]) == 0  # a chain of 2 tokens at least; back off 3 steps
    assert "1 prompt(s), single, chain:2/first:2:3+lookup 1x8: 6 tokens from" in capsys.readouterr().out
    assert main([*base, "--tree", "chain:2", "--prompt", "x", "--adaptive", "first"]) == 2
    err = capsys.readouterr().err
    assert "--adaptive first drafts with the model where the source proposes nothing" in err


def test_decode_refuses_bad_source_options_by_name(model_dirs, tmp_path, capsys):
    target, draft = model_dirs
    base = ["decode", "--target", str(target), "--prompt", "the cat", "--tree", "none"]
    for extra, says in (
        (["--source", "web"], "--source: source 'web' must be one of lookup, datastore, dictionary"),
        (["--source", "datastore"], "--source: source datastore needs a datastore directory"),
        (["--source", "lookup", "--retrieve", "0", "8"], "--retrieve takes WIDTH DEPTH, two integers >= 1"),
        (["--adaptive", "grow"], "--adaptive truncates the draft model's tree"),
        (["--adaptive", "fast"], "--adaptive must be none or one of grow, rate, first, got 'fast'"),
        (["--adaptive", "first:2:x"], "--adaptive: source first is written first[:N[:M]] with integers"),
        (["--adaptive", "first:0"], "--adaptive: min_tokens must be an integer >= 1, got 0"),
        (["--compare"], "give --target and --draft"),  # HF assisted generation needs the draft
    ):
        assert main([*base, *extra]) == 2, extra
        assert says in capsys.readouterr().err, extra
    assert main(["decode", "--target", str(target), "--prompt", "x", "--tree", "chain:2"]) == 2
    assert "give --target and --draft" in capsys.readouterr().err  # a model tree needs its draft


@pytest.fixture
def no_model_loads(monkeypatch):
    """Loading a model fails the test: what is refused must be refused before."""
    import importlib

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    for module, name in (("mdsd.drafters.pair", "load_target_and_drafter"), ("mdsd.hf.load", "load_model")):
        monkeypatch.setattr(importlib.import_module(module), name, no_load)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--tree", "binary:3", "--verifier", "block", "--prompt", "the cat"],
            "--verifier block with --tree binary:3: verifier 'block' verifies a chain (Tree.chain(L), --tree "
            "chain:N), not a tree",
        ),
        (
            ["--tree", "dynamic:3,2,2", "--verifier", "traversal", "--prompt", "the cat"],
            "--verifier traversal with --tree dynamic:3,2,2: verifier 'traversal' verifies a whole static "
            "mdsd.Tree per step: no DynamicTree, source or depth policy",
        ),
        (
            ["--tree", "chain:3", "--verifier", "block", "--source", "lookup", "--prompt", "the cat"],
            "--verifier block with --tree chain:3: verifier 'block' verifies a whole static mdsd.Tree per "
            "step: no DynamicTree, source or depth policy",
        ),
        (["--prompt", ""], "--prompt is empty: give the text the models continue"),
        (
            ["--prompt", "the cat", "--prompt", ""],
            "--prompt number 2 is empty: give the text the models continue",
        ),
        (["--prompts-file", "missing.txt"], "--prompts-file missing.txt: no such file"),
        (["--tree", "missing.json", "--prompt", "the cat"], "--tree missing.json: no such file"),
    ],
)
def test_decode_refuses_before_loading_a_model_regression(
    model_dirs, capsys, monkeypatch, no_model_loads, tmp_path, argv, message
):
    """Bug: `--tree binary:3 --verifier block` and `--prompt ""` were refused only after both models loaded
    (12-17 s on the real pair); the verifier's constraints on the tree and the prompts are checked first."""
    monkeypatch.chdir(tmp_path)
    target, draft = model_dirs
    assert main(["decode", "--target", str(target), "--draft", str(draft), *argv]) == 2
    assert capsys.readouterr().err == f"mdsd decode: error: {message}\n"


def test_decode_names_its_flags_regression(capsys, no_model_loads):
    """Bug: `--pair x` answered in the Python API's words ("name must be one of ['qwen2.5-coder']")."""
    assert main(["decode", "--pair", "x", "--prompt", "the cat"]) == 2
    assert capsys.readouterr().err == "mdsd decode: error: --pair must be one of qwen2.5-coder, got 'x'\n"
    assert main(["decode", "--target", "T", "--draft", "D", "--dtype", "int7", "--prompt", "the cat"]) == 2
    assert "mdsd decode: error: --dtype must name a torch floating dtype" in capsys.readouterr().err


@pytest.mark.parametrize(
    "tree, verified",
    [
        ("chain:3", "single (spechub has no one-draft form; every node has one child)"),
        ("kary:2,1", "spechub (single-draft where a node has one child)"),
        ("binary:2", "spechub"),
    ],
)
def test_the_summary_says_what_verified_regression(model_dirs, capsys, tree, verified):
    """Bug: `--tree chain:4 --verifier spechub` verified every node with the single-draft rule (SpecHub is
    defined for two drafts) while the summary said "spechub". The fallback stays (a node with one draft has
    one optimal rule, and mixed trees need it), and the summary says what verified."""
    target, draft = model_dirs
    args = ["decode", "--target", str(target), "--draft", str(draft), "--tree", tree, "--verifier", "spechub"]
    assert main([*args, "--temperature", "0.6", "--prompt", "the cat", "--max-new-tokens", "4"]) == 0
    assert f"1 prompt(s), {verified}, {tree}: 4 tokens from" in capsys.readouterr().out


def test_the_decoder_and_its_outputs_say_what_verified():
    from tiny_lms import perturbed, tiny_lm

    from mdsd import TreeDecoder

    target = tiny_lm(0)
    draft = perturbed(target, 0.3, seed=1)
    prompt = torch.tensor([[3, 1, 4]])
    for tree, name, temperature, verified in [
        (Tree.chain(2), "spechub", 0.6, "single (spechub has no one-draft form; every node has one child)"),
        (Tree.kary([2, 1]), "spechub", 0.6, "spechub (single-draft where a node has one child)"),
        (Tree.chain(2), "rrs", 0.6, "rrs"),  # RRS has a one-draft form: no fallback
        (Tree.chain(2), "spechub", 0.0, "spechub"),  # greedy: no node verifier at all
        (Tree.chain(2), "block", 0.6, "block"),
    ]:
        decoder = TreeDecoder(target, draft, tree, name, temperature)
        out = decoder.generate(prompt, 3, torch.Generator().manual_seed(0))
        assert decoder.verified_by == out.verified_by == verified, (tree, name, temperature)
