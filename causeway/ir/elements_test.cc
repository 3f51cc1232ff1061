// The IR's element conversions (ir/elements.h): what `convert` computes on
// the cpu kind, and what literals are converted and read with.
#include "causeway/ir/elements.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::ir {
namespace {

using ::testing::ElementsAre;

template <typename To, typename From>
std::vector<To> Convert(DType from, DType to, const std::vector<From>& in) {
  std::vector<To> out(in.size());
  ConvertElements(from, to, in.data(), out.data(), static_cast<int64_t>(in.size()));
  return out;
}

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(ElementsTest, EveryHalfSurvivesARoundTripThroughF32) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << "half bits " << h << " = " << f;
  }
}

TEST(ElementsTest, HalfRoundsToNearestEvenAndOverflowsToInfinity) {
  // 1 + 2^-11 lies half way between 1 and the next half, 1 + 2^-10: even is 1.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3 * 2^-11 lies half way between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(HalfToFloat(FloatToHalf(65504.0f)), 65504.0f);  // the largest half
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(65520.0f))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));  // subnormal
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::ldexp(1.0f, -26))), 0.0f);
}

TEST(ElementsTest, BFloat16KeepsF32sRangeAndRoundsToNearestEven) {
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(3e38f)), Bits(0x7f62u << 16));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBFloat16(f), h);
    }
  }
}

TEST(ElementsTest, FloatsToIntegersTruncateAndSaturateAndNaNIsZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in = {-1.7f, 3.9f, 300.0f, -300.0f, nan, 1e30f, -1e30f};
  EXPECT_THAT(Convert<int8_t>(DType::kF32, DType::kI8, in),
              ElementsAre(-1, 3, 127, -128, 0, 127, -128));
  EXPECT_THAT(Convert<uint8_t>(DType::kF32, DType::kU8, in),
              ElementsAre(0, 3, 255, 0, 0, 255, 0));
  EXPECT_THAT(Convert<int32_t>(DType::kF32, DType::kI32, in),
              ElementsAre(-1, 3, 300, -300, 0, INT32_MAX, INT32_MIN));
  EXPECT_THAT(Convert<int64_t>(DType::kF32, DType::kI64, in),
              ElementsAre(-1, 3, 300, -300, 0, INT64_MAX, INT64_MIN));
}

TEST(ElementsTest, IntegersNarrowByWrapping) {
  const std::vector<int64_t> wide = {(int64_t{1} << 32) + 5, -1, 300, INT64_MIN};
  EXPECT_THAT(Convert<int32_t>(DType::kI64, DType::kI32, wide), ElementsAre(5, -1, 300, 0));
  EXPECT_THAT(Convert<int8_t>(DType::kI64, DType::kI8, wide), ElementsAre(5, -1, 44, 0));
  EXPECT_THAT(Convert<uint8_t>(DType::kI64, DType::kU8, wide), ElementsAre(5, 255, 44, 0));
  const std::vector<int8_t> small = {-128, -1, 127};
  EXPECT_THAT(Convert<int64_t>(DType::kI8, DType::kI64, small), ElementsAre(-128, -1, 127));
  EXPECT_THAT(Convert<int32_t>(DType::kI8, DType::kI32, small), ElementsAre(-128, -1, 127));
  const std::vector<uint8_t> bytes = {0, 200, 255};
  EXPECT_THAT(Convert<int32_t>(DType::kU8, DType::kI32, bytes), ElementsAre(0, 200, 255));
  EXPECT_THAT(Convert<float>(DType::kU8, DType::kF32, bytes), ElementsAre(0.0f, 200.0f, 255.0f));
}

TEST(ElementsTest, PredIsNonZeroAndReadsAsZeroOrOne) {
  const std::vector<uint16_t> halves = {FloatToHalf(0.0f), FloatToHalf(-0.0f),
                                        FloatToHalf(0.5f)};
  EXPECT_THAT(Convert<uint8_t>(DType::kF16, DType::kPred, halves), ElementsAre(0, 0, 1));
  const std::vector<int64_t> wide = {0, int64_t{1} << 40};
  EXPECT_THAT(Convert<uint8_t>(DType::kI64, DType::kPred, wide), ElementsAre(0, 1));
  const std::vector<uint8_t> pred = {0, 1};
  EXPECT_THAT(Convert<uint16_t>(DType::kPred, DType::kBF16, pred),
              ElementsAre(FloatToBFloat16(0.0f), FloatToBFloat16(1.0f)));
  EXPECT_THAT(Convert<int64_t>(DType::kPred, DType::kI64, pred), ElementsAre(0, 1));
}

TEST(ElementsTest, LiteralsConvertPrintAndReadInEveryDtype) {
  const Literal wide = Literal::I64({3}, {-2, 40000, int64_t{1} << 53});
  EXPECT_EQ(wide.shape().byte_size(), 24);
  const Literal half = ConvertLiteral(wide, DType::kF16);
  EXPECT_EQ(half.shape(), Shape(DType::kF16, {3}));
  EXPECT_EQ(half.byte_size(), 6u);
  EXPECT_EQ(ElementAsDouble(half, 0), -2.0);
  EXPECT_EQ(ElementAsDouble(half, 1), 40000.0);
  EXPECT_TRUE(std::isinf(ElementAsDouble(half, 2)));
  EXPECT_EQ(ElementAsDouble(wide, 2), 9007199254740992.0);
  EXPECT_EQ(wide.ToString(), "i64[3] {-2, 40000, 9007199254740992}");
  EXPECT_EQ(ConvertLiteral(Literal::F32({2}, {0.5f, -3.0f}), DType::kBF16).ToString(),
            "bf16[2] {0.5, -3}");
  EXPECT_EQ(ConvertLiteral(Literal::I32({2}, {-1, 7}), DType::kU8).ToString(), "u8[2] {255, 7}");
}

TEST(ElementsTest, DtypesAreNamedSizedAndNumberedForTheWire) {
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(ByteSize(DType::kF16), 2);
  EXPECT_EQ(ByteSize(DType::kI64), 8);
  EXPECT_EQ(ByteSize(DType::kU8), 1);
  EXPECT_EQ(ComputeDType(DType::kBF16), DType::kF32);
  EXPECT_EQ(ComputeDType(DType::kI8), DType::kI32);
  EXPECT_EQ(ComputeDType(DType::kPred), DType::kPred);
  EXPECT_TRUE(IsStorageOnly(DType::kI64));
  EXPECT_FALSE(IsStorageOnly(DType::kI32));
  EXPECT_TRUE(IsValidDType(kNumDTypes - 1));
  EXPECT_FALSE(IsValidDType(kNumDTypes));
  EXPECT_FALSE(IsValidDType(-1));
  // Serialized numbers never change: the first three kept theirs.
  EXPECT_EQ(static_cast<int>(DType::kPred), 2);
  EXPECT_EQ(static_cast<int>(DType::kU8), 7);
}

}  // namespace
}  // namespace causeway::ir
