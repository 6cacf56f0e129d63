// Stand-in (our own) for the two CUTLASS element types static_switch.h names.
#pragma once
namespace cutlass { struct half_t {}; struct bfloat16_t {}; }
