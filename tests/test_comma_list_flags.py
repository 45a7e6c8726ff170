"""Comma lists of whole numbers (``tier --at-capacity-blocks``, ``run --concurrency``): an
empty item or a thousands comma is refused, never skipped or split into other numbers
(found by the second break-it pass of issue 28: ``--at-capacity-blocks 1,,2`` answered for
[1, 2], ``1,000`` for the capacities 1 and 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvgate.commands._types import count_list
from kvgate.commands.run import levels_of
from kvgate.errors import KvgateError
from test_properties_commands import run_command

TRACE = str(Path(__file__).resolve().parent / "data/traces/mooncake_conversation_head.jsonl")


@pytest.mark.parametrize(("text", "needle"), [("1,,2", "an empty item"), (" , ", "an empty item"),
                                              ("1,000", "leading zero"), ("256,", "an empty item"),
                                              ("-1", "must not be negative"), ("9" * 5000, "more than 64 characters"),
                                              ("2199023255553", "is above"), ("1.5", "whole number")])
def test_tier_capacity_list_refuses_empty_items_thousands_commas_and_out_of_range(text, needle):
    code, doc, _ = run_command(["tier", "--trace", TRACE, "--model", "llama-3.1-8b", f"--at-capacity-blocks={text}"])
    assert code == 2 and "--at-capacity-blocks" in doc["error"] and needle in doc["error"], doc


def test_tier_capacity_list_reads_grouped_items_and_reports_each():
    code, doc, _ = run_command(["tier", "--trace", TRACE, "--model", "llama-3.1-8b", "--at-capacity-blocks",
                                "0, 1_024,4"])
    assert code == 0
    assert sorted(p["capacity_blocks"] for p in doc["curve"]) == [0, 4, 1024]


def test_count_list_reads_each_item_by_the_one_count_parser():
    assert count_list("1, 2_0,0", "--x") == [1, 20, 0]
    with pytest.raises(KvgateError, match="'01' has a leading zero"):
        count_list("01", "--x")


@pytest.mark.parametrize("text", ["1,,2", "1,000", "2,", "abc", "9" * 5000])
def test_run_concurrency_refuses_empty_items_and_thousands_commas(text):
    with pytest.raises(KvgateError, match="--concurrency"):
        levels_of(text, ["serve", "{n}"])


def test_run_concurrency_levels_sorted_and_distinct():
    assert levels_of("4,1,2,4", ["serve", "{n}"]) == [1, 2, 4]
