"""WGSL for the kinds that land later (conv, random, optimizer reductions)."""

from __future__ import annotations


def table() -> dict:
    return {}
