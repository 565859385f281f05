// ember: one include for the whole public API.
#pragma once
#include "ember/autocast.h"
#include "ember/autograd.h"
#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/ops.h"
#include "ember/tensor.h"
