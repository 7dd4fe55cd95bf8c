"""A ``requires=`` constant is read by its type (ok_requires_constants.py): a typo in it is
named as in a list written out; a ``Final`` list is typed ``list[str]``, which names no kind."""

from __future__ import annotations

from typing import Final

from kumiko_typed import Feature

KINDS: Final = ("mail.send", "webhook.sned")
typo_in_constant = Feature("tc", requires=KINDS)  # E: kumiko-tier  # M: "webhook.sned" in requires= is not a tier-2 step kind; use one of "call_feature", "mail.send", "webhook.send"
AS_LIST: Final = ["mail.send"]
final_list = Feature("fl", requires=AS_LIST)  # E: kumiko-tier  # M: requires= must be a list of string literals (e.g. requires=["mail.send"]), or a constant whose type names them (KINDS: Final = ("mail.send",)), so that the plugin can check each tier-2 step
