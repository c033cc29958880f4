// Row helpers of the bf16 encoder path (bf16_matmul.h): F32ToBf16Rows and
// ExpShiftedToBf16 now live one layer down, with the GQA op's bf16 kernel
// that shares them (attention/bf16_convert.h). Internal to src/vision.
#pragma once

#include "attention/bf16_convert.h"
