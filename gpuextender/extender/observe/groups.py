"""Multi-pod groups, counted at scrape time (state/group_book.py)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.group_book import GroupBook


class GroupsCollector(Collector):
    def __init__(self, book: GroupBook) -> None:
        self._book = book

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        book, counts = self._book, self._book.counts
        yield GaugeMetricFamily(
            "gpu_extender_groups_held",
            "Multi-pod groups with a domain chosen and room held for members not yet bound.",
            value=len(book),
        )
        yield GaugeMetricFamily(
            "gpu_extender_group_members_held",
            "Members of those groups not yet bound, whose GPUs are held (every other pod reads them as taken).",
            value=sum(plan.held_members() for plan in book.plans()),
        )
        yield CounterMetricFamily(
            "gpu_extender_groups_placed_whole",
            "Groups whose every member was bound in the domain held for them.",
            value=counts.placed_whole,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_no_domain",
            "Group members' filters that found no domain holding the whole group (every node failed GroupDoesNotFit).",
            value=counts.no_domain,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_holds_expired",
            "Group holds released after --group-hold without a member binding (explain says which and why).",
            value=counts.expired,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_book_full",
            "Filters of a new group's members told to wait because the most groups the extender holds "
            "at once were in flight.",
            value=counts.refused_full,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_namespace_full",
            "Filters of a new group's members told to wait because their namespace had "
            "--group-holds-per-namespace groups held.",
            value=counts.refused_namespace,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_awaiting_members",
            "Filters of a group's members told to wait because its last hold expired with members that "
            "never came and this member was one that did (a new member, or one bound, ends the wait).",
            value=counts.refused_awaiting,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_waits_for_domain",
            "Filters of a group's members that kube-scheduler offered one domain alone while another, "
            "stranding fewer GPUs, holds the group (every node failed GroupWaitsForDomain).",
            value=counts.waited_for_domain,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_domains_given_up",
            "Domains a group gave up because kube-scheduler went round its domains without offering "
            "them (its own filters left every node there out).",
            value=counts.domains_given_up,
        )
        yield CounterMetricFamily(
            "gpu_extender_group_members_missing",
            "Group holds released because fewer of the group's members than its size existed as pods "
            "--group-members-grace after the hold began.",
            value=counts.members_missing,
        )
