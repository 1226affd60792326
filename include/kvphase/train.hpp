#pragma once
/// \file train.hpp  Umbrella header of kvphase::train: trainable toy retrieval models over a
/// compressed cache, their trainer and the mitigations. Not part of <kvphase/kvphase.hpp> (see
/// there why); include it where models are trained.
#include "kvphase/train/adam.hpp"
#include "kvphase/train/mitigations.hpp"
#include "kvphase/train/model.hpp"
#include "kvphase/train/task.hpp"
#include "kvphase/train/trainer.hpp"
