#pragma once
/// \file version.hpp  kvphase version macros.
#define KVPHASE_VERSION_MAJOR 0
#define KVPHASE_VERSION_MINOR 4
#define KVPHASE_VERSION_PATCH 0
#define KVPHASE_VERSION_STRING "0.4.0"
