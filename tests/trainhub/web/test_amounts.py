"""Amounts as pages print them: a part in its whole's unit."""

from __future__ import annotations

from trainhub.tenancy.resources import Resources
from trainhub.web.cluster import allocations, amount


def test_memory_reads_in_gib_from_one_gib_and_a_part_in_its_wholes_unit() -> None:
    assert amount("memory_mb", 512) == "512 MiB"
    assert amount("memory_mb", 32768) == "32 GiB"
    assert amount("memory_mb", 512, like=32768) == "0.5 GiB"
    (cpu, memory, gpu) = allocations(
        Resources(cpu=1, memory_mb=512, gpu=0), Resources(cpu=8, memory_mb=32768, gpu=0)
    )
    assert memory.text == "0.5 GiB of 32 GiB allocated (2%)"  # not "512 MiB of 32 GiB"
    assert cpu.text == "1 CPU of 8 CPU allocated (12%)"
    assert gpu.text == "no capacity"
