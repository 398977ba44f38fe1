"""--prepare's choices without the network: which requirements travel as wheels, which wheel
files the GPU machine's CPython 3.12 on manylinux x86-64 can install, and the printed command."""

import pytest

from benchmarks.gpucheck import wheels

DOWNLOADED = [  # the names pip saved for --prepare on 2026-11-24
    "msgspec-0.22.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
    "libcst-1.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
    "pyyaml-6.0.4-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
]


def test_exactly_msgspec_and_libcst_travel_the_rest_is_on_the_gpu_machine():
    """If this fails, a requirement was added: carry it (take it out of GPU_MACHINE_HAS) or
    confirm the GPU machine's image has it."""
    reqs = wheels.project_requirements()
    assert {"torch", "rich", "msgspec", "libcst", "nvidia-ml-py", "pytest", "numpy", "playwright"} <= {
        wheels.requirement_name(r) for r in reqs}
    assert {wheels.requirement_name(r) for r in wheels.missing_on_gpu(reqs)} == {"msgspec", "libcst"}


@pytest.mark.parametrize("name", [*DOWNLOADED, "tool-1.0-py3-none-any.whl",
                                  "fast-2.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                                  "new-1.0-cp312-cp312-manylinux_2_39_x86_64.whl"])
def test_wheels_the_gpu_machine_can_install(name):
    assert wheels.fits_gpu_machine(name)


@pytest.mark.parametrize("name", [
    "msgspec-0.22.0-cp311-cp311-manylinux_2_17_x86_64.whl",  # another Python
    "msgspec-0.22.0-cp312-cp312-manylinux_2_17_aarch64.whl",  # another processor
    "msgspec-0.22.0-cp312-cp312-musllinux_1_2_x86_64.whl",  # another libc
    "msgspec-0.22.0-cp312-cp312-win_amd64.whl",
    "msgspec-0.22.0-cp312-cp312-macosx_11_0_arm64.whl",
    "msgspec-0.22.0-cp312-cp312-manylinux_2_40_x86_64.whl",  # needs a newer glibc than 2.39
    "fast-2.0-cp313-abi3-manylinux_2_17_x86_64.whl",  # stable ABI from 3.13 on
])
def test_wheels_it_cannot(name):
    assert not wheels.fits_gpu_machine(name)


def test_a_rehearsal_interpreter_is_told_apart_from_the_gpu_machines():
    assert wheels.fits_interpreter(DOWNLOADED[1], (3, 12))
    assert not wheels.fits_interpreter(DOWNLOADED[1], (3, 11))
    assert wheels.fits_interpreter("tool-1.0-py3-none-any.whl", (3, 11))


def test_two_versions_of_one_package_are_caught():
    assert wheels.duplicates([*DOWNLOADED, "libcst-1.8.0-cp312-cp312-manylinux_2_28_x86_64.whl"]) == ["libcst"]
    assert wheels.duplicates(DOWNLOADED) == []
    with pytest.raises(ValueError, match="not a wheel"):
        wheels.wheel_parts("libcst-1.9.0.tar.gz")


def test_the_printed_instructions_name_the_command_the_carry_and_unpack():
    manifest = {"wheels": [{"file": DOWNLOADED[1], "bytes": 2 << 20}], "left_out_already_on_gpu_machine": [DOWNLOADED[2]]}
    text = wheels.instructions(manifest)
    assert "libcst 1.9.0" in text and DOWNLOADED[2] in text
    assert wheels.DEVICE_COMMAND in text and "carry:   .gpu-wheels" in text
    assert "python3 dev.py gpu --unpack" in text
