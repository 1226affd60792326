#pragma once
/// \file version.hpp  kvphase version macros.
#define KVPHASE_VERSION_MAJOR 0
#define KVPHASE_VERSION_MINOR 2
#define KVPHASE_VERSION_PATCH 2
#define KVPHASE_VERSION_STRING "0.2.2"
