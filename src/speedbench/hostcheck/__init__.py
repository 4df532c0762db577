"""What the host is and what else runs on it while a level is measured.

``cpu`` reads the CPU's kernel family (AVX2, AVX-512, native bf16, AMX), the kernel caps in an
engine's environment and the cores an engine is bound to; ``contention`` samples the other
processes' share of the CPUs before and after a level and flags a level measured on a busy host.
"""
