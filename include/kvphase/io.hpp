#pragma once
/// \file io.hpp  Umbrella header of kvphase::io: CSV / JSON with provenance, the sweep output
/// format (kvphase-sweep/1), its readers and shard merging, config JSON, and the sweep-result →
/// output path (sim/report.hpp). Not part of <kvphase/kvphase.hpp>
/// (see there why); include it where outputs are written or read.
#include "kvphase/io/csv.hpp"
#include "kvphase/io/fields_json.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/provenance.hpp"
#include "kvphase/io/sweep_format.hpp"
#include "kvphase/sim/report.hpp"
