"""scripts/build_flags.py: the CMake flags the set-up builds llama.cpp with."""

from build_flags import choose_cmake_args, cmake_args_for_x86, cpu_flags_from_cpuinfo  # scripts/ (pytest pythonpath)

CPUINFO = "processor\t: 0\nflags\t\t: fpu sse avx avx2 fma f16c bmi2 avx512f avx512_vnni amx_tile amx_int8\n"


def test_flags_read_from_cpuinfo():
    assert {"avx2", "amx_tile"} <= cpu_flags_from_cpuinfo(CPUINFO)


def test_never_enables_amx_even_when_reported():
    args = cmake_args_for_x86(cpu_flags_from_cpuinfo(CPUINFO))
    assert "-DGGML_NATIVE=OFF" in args
    assert "-DGGML_AVX512=ON" in args
    assert "AMX_TILE=ON" not in args and "-DGGML_AMX_TILE=OFF" in args


def test_avx2_only_laptop_gets_no_avx512():
    args = cmake_args_for_x86({"avx", "avx2", "fma", "f16c"})
    assert "-DGGML_AVX2=ON" in args and "AVX512" not in args


def test_a_gpu_backend_keeps_the_cpu_flags_on_x86():
    cpu = cmake_args_for_x86(cpu_flags_from_cpuinfo(CPUINFO))
    for backend in ("-DGGML_CUDA=on", "-DGGML_VULKAN=on", "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real"):
        args = choose_cmake_args({"CMAKE_ARGS": backend}, "x86_64", CPUINFO)
        assert args == f"{backend} {cpu} -DGGML_RPC=ON" and "-DGGML_NATIVE=OFF" in args and "AMX_TILE=ON" not in args


def test_user_cmake_args_that_choose_the_cpu_side_pass_through_untouched():
    for user in (
        "-DGGML_CUDA=on -DGGML_NATIVE=ON",
        "-DGGML_AVX2=ON",
        "-DGGML_AMX_TILE=ON",
        "-DGGML_CPU_ALL_VARIANTS=ON",
    ):
        assert choose_cmake_args({"CMAKE_ARGS": user}, "x86_64", CPUINFO) == f"{user} -DGGML_RPC=ON"
    metal = choose_cmake_args({"CMAKE_ARGS": "-DGGML_METAL=on"}, "arm64", None)  # Apple Silicon
    assert metal == "-DGGML_METAL=on -DGGML_RPC=ON"
    cuda = choose_cmake_args({"CMAKE_ARGS": "-DGGML_CUDA=on"}, "aarch64", "flags: fp asimd")
    assert cuda == "-DGGML_CUDA=on -DGGML_RPC=ON"


def test_non_x86_uses_llama_cpp_defaults_with_the_rpc_backend():
    assert choose_cmake_args({}, "arm64", None) == "-DGGML_RPC=ON"


def test_every_build_has_the_rpc_backend_unless_the_user_chose():
    assert choose_cmake_args({}, "x86_64", CPUINFO).endswith(" -DGGML_RPC=ON")
    assert choose_cmake_args({"CMAKE_ARGS": "-DGGML_RPC=OFF"}, "arm64", None) == "-DGGML_RPC=OFF"
