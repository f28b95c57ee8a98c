"""/proc/cpuinfo "flags" lines of the three CPU kinds the benchmark keeps run files for.

AVX2: captured on the AMD EPYC (family 25, model 1: Zen 3) KVM guest issue 33's AVX2 figures come from
(`grep -m1 flags /proc/cpuinfo`, 2026-12-05). AMX and AVX-512 BF16: written out from the flags Linux prints on
an Intel Xeon 4th generation (Sapphire Rapids) and an AMD EPYC 4th generation (Genoa, Zen 4) cloud guest; no
such machine was at hand to capture them, so they are complete lists of the features those CPUs report, not a
byte-for-byte capture. Every flag the kinds and peaks read (avx2, fma, avx512f, avx512_bf16, amx_bf16,
amx_tile) is in the lists as those CPUs report it.
"""

AVX2_ZEN3 = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall "
    "nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid "
    "tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes "
    "xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw "
    "topoext cpuid_fault vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt "
    "clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero xsaveerptr arat umip vaes vpclmulqdq rdpid fsrm")

AMX_SAPPHIRE_RAPIDS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht "
    "syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni "
    "pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand "
    "hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust "
    "bmi1 hle avx2 smep bmi2 erms invpcid rtm avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd "
    "sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 arat avx512vbmi umip pku ospke "
    "waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq la57 rdpid cldemote "
    "movdiri movdir64b fsrm md_clear serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 arch_capabilities")

AVX512_BF16_GENOA = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall "
    "nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid tsc_known_freq "
    "pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor "
    "lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall "
    "fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt "
    "clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 clzero xsaveerptr wbnoinvd "
    "arat avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq "
    "rdpid fsrm")

# /proc/cpuinfo and lscpu of the AVX2 machine above (abridged to the lines the benchmark reads).
AVX2_CPUINFO = f"processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2445.420\nflags\t\t: {AVX2_ZEN3}\n"
AVX2_LSCPU = ("Architecture:            x86_64\nCPU(s):                  2\nModel name:              AMD EPYC\n"
              "Thread(s) per core:      1\nCore(s) per socket:      2\nSocket(s):               1\n"
              "BogoMIPS:                4890.84\n")
