// Tests for causeway/topology/mesh.h and topology.h: mesh coordinates and
// collective groups, sharding validation and shard geometry, box copies
// (against a naive element-by-element reference) and the topology registry.

#include "causeway/topology/mesh.h"

#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "causeway/base/ids.h"
#include "causeway/ir/shape.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/topology/topology.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {

// So that failed expectations print ranges readably.
void PrintTo(const Range& r, std::ostream* os) { *os << "[" << r.begin << ", " << r.end << ")"; }

namespace {

using ::causeway::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<DeviceId> Devices(int first, int n) {
  std::vector<DeviceId> out;
  for (int i = 0; i < n; ++i) out.push_back(DeviceId(first + i));
  return out;
}

// {x: 2, y: 3} on island 0, devices 10..15 in row-major order.
Mesh Mesh2x3() {
  return Mesh(MeshId(1), IslandId(0), {{"x", 2}, {"y", 3}}, Devices(10, 6));
}

// {a: 2, b: 2, c: 2}, devices 0..7.
Mesh Mesh2x2x2() {
  return Mesh(MeshId(2), IslandId(0), {{"a", 2}, {"b", 2}, {"c", 2}}, Devices(0, 8));
}

ir::Shape F32(std::vector<int64_t> dims) { return ir::Shape(ir::DType::kF32, std::move(dims)); }

// ---------------------------------------------------------------------------
// Mesh

TEST(MeshTest, CoordinatesAreRowMajorOverTheAxes) {
  const Mesh mesh = Mesh2x3();
  EXPECT_THAT(mesh.Coordinates(0), ElementsAre(0, 0));
  EXPECT_THAT(mesh.Coordinates(2), ElementsAre(0, 2));
  EXPECT_THAT(mesh.Coordinates(3), ElementsAre(1, 0));
  EXPECT_THAT(mesh.Coordinates(5), ElementsAre(1, 2));
  for (int linear = 0; linear < mesh.size(); ++linear) {
    const std::vector<int64_t> c = mesh.Coordinates(linear);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0] * 3 + c[1], linear);
  }
}

TEST(MeshTest, CoordinatesOfAThreeDimensionalMesh) {
  const Mesh mesh = Mesh2x2x2();
  EXPECT_THAT(mesh.Coordinates(0), ElementsAre(0, 0, 0));
  EXPECT_THAT(mesh.Coordinates(1), ElementsAre(0, 0, 1));
  EXPECT_THAT(mesh.Coordinates(2), ElementsAre(0, 1, 0));
  EXPECT_THAT(mesh.Coordinates(6), ElementsAre(1, 1, 0));
  EXPECT_THAT(mesh.Coordinates(7), ElementsAre(1, 1, 1));
}

TEST(MeshTest, AxisIndexFindsAxesByNameAndReturnsMinusOneForUnknown) {
  const Mesh mesh = Mesh2x3();
  EXPECT_EQ(mesh.AxisIndex("x"), 0);
  EXPECT_EQ(mesh.AxisIndex("y"), 1);
  EXPECT_EQ(mesh.AxisIndex("z"), -1);
  EXPECT_EQ(mesh.AxisIndex(""), -1);
}

TEST(MeshTest, IndexOfFindsTheDevicePositionAndReturnsMinusOneForUnknown) {
  const Mesh mesh = Mesh2x3();
  EXPECT_EQ(mesh.IndexOf(DeviceId(10)), 0);
  EXPECT_EQ(mesh.IndexOf(DeviceId(13)), 3);
  EXPECT_EQ(mesh.IndexOf(DeviceId(15)), 5);
  EXPECT_EQ(mesh.IndexOf(DeviceId(9)), -1);
  EXPECT_EQ(mesh.IndexOf(DeviceId(16)), -1);
}

TEST(MeshTest, AccessorsReturnWhatWasGiven) {
  const Mesh mesh = Mesh2x3();
  EXPECT_EQ(mesh.id(), MeshId(1));
  EXPECT_EQ(mesh.island(), IslandId(0));
  EXPECT_EQ(mesh.size(), 6);
  EXPECT_EQ(mesh.devices(), Devices(10, 6));
  EXPECT_EQ(mesh.axes()[1], (MeshAxis{"y", 3}));
}

TEST(MeshTest, CopiesShareTheirDevicesAndCompareEqual) {
  const Mesh mesh = Mesh2x3();
  const Mesh copy = mesh;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(&copy.devices(), &mesh.devices());
  EXPECT_EQ(copy, mesh);
  EXPECT_TRUE(copy.SameDevices(mesh));
}

TEST(MeshTest, EqualityComparesContentsWhenNotShared) {
  const Mesh a = Mesh2x3();
  const Mesh b = Mesh2x3();  // built separately: equal, not shared
  EXPECT_NE(&a.devices(), &b.devices());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(a.SameDevices(b));
  const Mesh other_devices(MeshId(1), IslandId(0), {{"x", 2}, {"y", 3}}, Devices(20, 6));
  EXPECT_NE(a, other_devices);
  EXPECT_FALSE(a.SameDevices(other_devices));
  const Mesh other_axes(MeshId(1), IslandId(0), {{"x", 3}, {"y", 2}}, Devices(10, 6));
  EXPECT_NE(a, other_axes);
  EXPECT_TRUE(a.SameDevices(other_axes));
  const Mesh other_id(MeshId(9), IslandId(0), {{"x", 2}, {"y", 3}}, Devices(10, 6));
  EXPECT_NE(a, other_id);
}

TEST(MeshTest, ADefaultMeshIsEmptyAndEqualToAnother) {
  const Mesh a;
  EXPECT_EQ(a.size(), 0);
  EXPECT_TRUE(a.axes().empty());
  EXPECT_EQ(a, Mesh());
  EXPECT_NE(a, Mesh2x3());
}

TEST(MeshTest, ToStringListsAxesAndIsland) {
  const Mesh mesh(MeshId(0), IslandId(0), {{"data", 2}, {"model", 4}}, Devices(0, 8));
  EXPECT_EQ(mesh.ToString(), "{data: 2, model: 4} on island 0");
}

TEST(MeshTest, GroupOverOneAxisVariesOnlyThatAxis) {
  const Mesh mesh = Mesh2x3();
  // Position 4 is (x=1, y=1).
  ASSERT_OK_AND_ASSIGN(std::vector<int> along_y, mesh.Group(4, std::vector<std::string>{"y"}));
  EXPECT_THAT(along_y, ElementsAre(3, 4, 5));
  ASSERT_OK_AND_ASSIGN(std::vector<int> along_x, mesh.Group(4, std::vector<std::string>{"x"}));
  EXPECT_THAT(along_x, ElementsAre(1, 4));
  // Every member of a group computes the same group.
  for (int member : along_y) {
    ASSERT_OK_AND_ASSIGN(std::vector<int> g, mesh.Group(member, std::vector<std::string>{"y"}));
    EXPECT_EQ(g, along_y);
  }
}

TEST(MeshTest, GroupsOverAreComputedOnceAndSharedByCopiesAndThreads) {
  const Mesh mesh = Mesh2x3();
  const Mesh copy = mesh;  // NOLINT: a copy shares the layout
  std::vector<const Mesh::Groups*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const Mesh& m = t % 2 == 0 ? mesh : copy;
      absl::StatusOr<const Mesh::Groups*> g = m.GroupsOver(std::vector<std::string>{"y"});
      if (g.ok()) seen[t] = *g;
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_NE(seen[0], nullptr);
  for (const Mesh::Groups* g : seen) EXPECT_EQ(g, seen[0]);
  const Mesh::Groups& y = *seen[0];
  // Position 4 is (x=1, y=1): group 1 (x = 1), rank 1, led by position 3.
  EXPECT_EQ(y.group_of[4], 1);
  EXPECT_EQ(y.rank[4], 1);
  EXPECT_EQ(y.leader[1], 3);
  EXPECT_THAT(y.members[1], ElementsAre(DeviceId(13), DeviceId(14), DeviceId(15)));
  ASSERT_OK_AND_ASSIGN(const Mesh::Groups* x, mesh.GroupsOver(std::vector<std::string>{"x"}));
  EXPECT_NE(x, seen[0]);
  EXPECT_EQ(x->members.size(), 3u);
  EXPECT_THAT(mesh.GroupsOver(std::vector<std::string>{"z"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("z")));
}

TEST(MeshTest, GroupOverSeveralAxesIsOrderedMajorToMinorAlongTheGivenAxes) {
  const Mesh mesh = Mesh2x2x2();
  // Position 2 is (a=0, b=1, c=0); the group over {a, c} keeps b = 1.
  ASSERT_OK_AND_ASSIGN(std::vector<int> ac,
                       mesh.Group(2, std::vector<std::string>{"a", "c"}));
  EXPECT_THAT(ac, ElementsAre(2, 3, 6, 7));
  // Naming the axes the other way round makes c the major one.
  ASSERT_OK_AND_ASSIGN(std::vector<int> ca,
                       mesh.Group(2, std::vector<std::string>{"c", "a"}));
  EXPECT_THAT(ca, ElementsAre(2, 6, 3, 7));
  ASSERT_OK_AND_ASSIGN(std::vector<int> bc,
                       mesh.Group(5, std::vector<std::string>{"b", "c"}));
  EXPECT_THAT(bc, ElementsAre(4, 5, 6, 7));
}

TEST(MeshTest, GroupOverAllAxesIsTheWholeMeshAndOverNoAxesIsTheDeviceAlone) {
  const Mesh mesh = Mesh2x3();
  ASSERT_OK_AND_ASSIGN(std::vector<int> all,
                       mesh.Group(4, std::vector<std::string>{"x", "y"}));
  EXPECT_THAT(all, ElementsAre(0, 1, 2, 3, 4, 5));
  ASSERT_OK_AND_ASSIGN(std::vector<int> none, mesh.Group(4, std::vector<std::string>{}));
  EXPECT_THAT(none, ElementsAre(4));
}

TEST(MeshTest, GroupRejectsAnUnknownAxis) {
  const Mesh mesh = Mesh2x3();
  EXPECT_THAT(mesh.Group(0, std::vector<std::string>{"x", "z"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'z'")));
}

TEST(MeshTest, GroupRejectsARepeatedAxis) {
  const Mesh mesh = Mesh2x3();
  EXPECT_THAT(mesh.Group(0, std::vector<std::string>{"y", "y"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'y'"), HasSubstr("twice"))));
}

// ---------------------------------------------------------------------------
// Sharding

TEST(ShardingTest, ValidateAcceptsEvenSplitsAndReplication) {
  const Mesh mesh = Mesh2x3();
  EXPECT_OK(Sharding({{"x"}, {"y"}}).Validate(F32({4, 6}), mesh));
  EXPECT_OK(Sharding({{"x", "y"}, {}}).Validate(F32({12, 5}), mesh));
  EXPECT_OK(Sharding({{}, {"y", "x"}}).Validate(F32({1, 6}), mesh));
  EXPECT_OK(Sharding::Replicated(2).Validate(F32({3, 5}), mesh));
  EXPECT_OK(Sharding::Replicated(0).Validate(F32({}), mesh));
}

TEST(ShardingTest, ValidateRejectsARankMismatch) {
  const Mesh mesh = Mesh2x3();
  EXPECT_THAT(Sharding({{"x"}}).Validate(F32({4, 6}), mesh),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  EXPECT_THAT(Sharding::Replicated(3).Validate(F32({4, 6}), mesh),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
}

TEST(ShardingTest, ValidateRejectsAnAxisTheMeshDoesNotHave) {
  const Mesh mesh = Mesh2x3();
  EXPECT_THAT(Sharding({{"model"}, {}}).Validate(F32({4, 6}), mesh),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'model'"), HasSubstr("does not have"))));
}

TEST(ShardingTest, ValidateRejectsAnAxisUsedTwice) {
  const Mesh mesh = Mesh2x3();
  EXPECT_THAT(Sharding({{"x"}, {"x"}}).Validate(F32({4, 6}), mesh),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'x'"), HasSubstr("more than once"))));
  EXPECT_THAT(Sharding({{"y", "y"}, {}}).Validate(F32({9, 6}), mesh),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'y'"), HasSubstr("more than once"))));
}

TEST(ShardingTest, ValidateRejectsAnUnevenSplit) {
  const Mesh mesh = Mesh2x3();
  EXPECT_THAT(Sharding({{}, {"y"}}).Validate(F32({4, 4}), mesh),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("uneven"), HasSubstr("dimension 1"))));
  // 6 splits into 2 and into 3, but not into 2 * 3.
  EXPECT_THAT(Sharding({{"x", "y"}, {}}).Validate(F32({4, 1}), mesh),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("uneven"), HasSubstr("dimension 0"))));
}

TEST(ShardingTest, IsReplicatedOnlyWhenNoDimensionIsSplit) {
  EXPECT_TRUE(Sharding::Replicated(2).IsReplicated());
  EXPECT_TRUE(Sharding::Replicated(0).IsReplicated());
  EXPECT_FALSE(Sharding({{}, {"x"}}).IsReplicated());
  EXPECT_EQ(Sharding::Replicated(2).rank(), 2);
}

TEST(ShardingTest, ToStringListsTheAxesOfEachDimension) {
  EXPECT_EQ(Sharding({{"data"}, {}}).ToString(), "[{data}, {}]");
  EXPECT_EQ(Sharding(std::vector<std::vector<std::string>>{{"x", "y"}}).ToString(), "[{x,y}]");
}

TEST(ShardingTest, ShardShapeDividesEachDimensionByItsParts) {
  const Mesh mesh = Mesh2x3();
  EXPECT_EQ(Sharding({{"x"}, {"y"}}).ShardShape(F32({4, 6}), mesh), F32({2, 2}));
  EXPECT_EQ(Sharding({{"x", "y"}, {}}).ShardShape(F32({12, 5}), mesh), F32({2, 5}));
  EXPECT_EQ(Sharding({{}, {"x"}}).ShardShape(F32({3, 8}), mesh), F32({3, 4}));
  EXPECT_EQ(Sharding::Replicated(2).ShardShape(F32({3, 5}), mesh), F32({3, 5}));
  const ir::Shape i32(ir::DType::kI32, {4, 6});
  EXPECT_EQ(Sharding({{"x"}, {}}).ShardShape(i32, mesh), ir::Shape(ir::DType::kI32, {2, 6}));
}

TEST(ShardingTest, ShardRangesSplitTheFirstDimensionOverOneAxis) {
  const Mesh mesh = Mesh2x3();
  const Sharding sharding({{"x"}, {}});
  for (int linear = 0; linear < mesh.size(); ++linear) {
    const int64_t x = mesh.Coordinates(linear)[0];
    EXPECT_THAT(sharding.ShardRanges(F32({4, 6}), mesh, linear),
                ElementsAre(Range{2 * x, 2 * x + 2}, Range{0, 6}))
        << "position " << linear;
  }
}

TEST(ShardingTest, ShardRangesSplitTheSecondDimensionOverOneAxis) {
  const Mesh mesh = Mesh2x3();
  const Sharding sharding({{}, {"y"}});
  for (int linear = 0; linear < mesh.size(); ++linear) {
    const int64_t y = mesh.Coordinates(linear)[1];
    EXPECT_THAT(sharding.ShardRanges(F32({4, 6}), mesh, linear),
                ElementsAre(Range{0, 4}, Range{2 * y, 2 * y + 2}))
        << "position " << linear;
  }
}

TEST(ShardingTest, ShardRangesOfTwoAxesOnOneDimensionAreMajorToMinor) {
  const Mesh mesh = Mesh2x3();
  const Sharding xy({{"x", "y"}, {}});
  const Sharding yx({{"y", "x"}, {}});
  for (int linear = 0; linear < mesh.size(); ++linear) {
    const int64_t x = mesh.Coordinates(linear)[0];
    const int64_t y = mesh.Coordinates(linear)[1];
    const int64_t xy_part = x * 3 + y;
    const int64_t yx_part = y * 2 + x;
    EXPECT_THAT(xy.ShardRanges(F32({12, 5}), mesh, linear),
                ElementsAre(Range{2 * xy_part, 2 * xy_part + 2}, Range{0, 5}))
        << "position " << linear;
    EXPECT_THAT(yx.ShardRanges(F32({12, 5}), mesh, linear),
                ElementsAre(Range{2 * yx_part, 2 * yx_part + 2}, Range{0, 5}))
        << "position " << linear;
  }
}

TEST(ShardingTest, ShardRangesOfAReplicatedArrayAreTheWholeArray) {
  const Mesh mesh = Mesh2x3();
  for (int linear = 0; linear < mesh.size(); ++linear) {
    EXPECT_THAT(Sharding::Replicated(2).ShardRanges(F32({3, 5}), mesh, linear),
                ElementsAre(Range{0, 3}, Range{0, 5}));
  }
}

TEST(ShardingTest, ShardsCoverEveryElementOncePerReplica) {
  const Mesh mesh = Mesh2x3();
  const ir::Shape shape = F32({6, 6});
  struct Case {
    Sharding sharding;
    int replicas;
  };
  const std::vector<Case> cases = {
      {Sharding({{"x"}, {"y"}}), 1},
      {Sharding({{"y"}, {"x"}}), 1},
      {Sharding({{"x"}, {}}), 3},
      {Sharding({{}, {"y"}}), 2},
      {Sharding({{}, {"x", "y"}}), 1},
      {Sharding::Replicated(2), 6},
  };
  for (const Case& c : cases) {
    ASSERT_OK(c.sharding.Validate(shape, mesh));
    const ir::Shape shard = c.sharding.ShardShape(shape, mesh);
    std::vector<int> count(36, 0);
    for (int linear = 0; linear < mesh.size(); ++linear) {
      const std::vector<Range> r = c.sharding.ShardRanges(shape, mesh, linear);
      ASSERT_EQ(r.size(), 2u);
      EXPECT_EQ(r[0].size(), shard.dims[0]) << c.sharding.ToString();
      EXPECT_EQ(r[1].size(), shard.dims[1]) << c.sharding.ToString();
      for (int64_t i = r[0].begin; i < r[0].end; ++i) {
        for (int64_t j = r[1].begin; j < r[1].end; ++j) ++count[i * 6 + j];
      }
    }
    for (int e = 0; e < 36; ++e) {
      EXPECT_EQ(count[e], c.replicas) << c.sharding.ToString() << " element " << e;
    }
  }
}

// ---------------------------------------------------------------------------
// CopyBox

// Copies element by element through multi-indices.
void NaiveCopyBox(const std::vector<uint8_t>& src, const std::vector<int64_t>& src_dims,
                  const std::vector<int64_t>& src_offset, std::vector<uint8_t>& dst,
                  const std::vector<int64_t>& dst_dims, const std::vector<int64_t>& dst_offset,
                  const std::vector<int64_t>& extent, int64_t element_bytes) {
  const size_t rank = extent.size();
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  for (int64_t flat = 0; flat < n; ++flat) {
    std::vector<int64_t> idx(rank);
    int64_t rest = flat;
    for (int i = static_cast<int>(rank) - 1; i >= 0; --i) {
      idx[i] = rest % extent[i];
      rest /= extent[i];
    }
    int64_t s = 0, d = 0;
    for (size_t i = 0; i < rank; ++i) {
      s = s * src_dims[i] + src_offset[i] + idx[i];
      d = d * dst_dims[i] + dst_offset[i] + idx[i];
    }
    std::memcpy(&dst[d * element_bytes], &src[s * element_bytes],
                static_cast<size_t>(element_bytes));
  }
}

int64_t Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

TEST(CopyBoxTest, RankZeroCopiesOneElement) {
  const float src = 3.5f;
  float dst = 0.f;
  CopyBox(&src, {}, {}, &dst, {}, {}, {}, sizeof(float));
  EXPECT_EQ(dst, 3.5f);
}

TEST(CopyBoxTest, RankOneCopiesASubrange) {
  const std::vector<int32_t> src = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int32_t> dst(6, -1);
  CopyBox(src.data(), {8}, {2}, dst.data(), {6}, {1}, {4}, sizeof(int32_t));
  EXPECT_THAT(dst, ElementsAre(-1, 2, 3, 4, 5, -1));
}

TEST(CopyBoxTest, RankTwoCopiesAnInteriorBox) {
  // src is 3x4: value = 10 * row + col.
  std::vector<int32_t> src(12);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) src[r * 4 + c] = 10 * r + c;
  }
  std::vector<int32_t> dst(9, -1);  // 3x3
  CopyBox(src.data(), {3, 4}, {1, 1}, dst.data(), {3, 3}, {0, 1}, {2, 2}, sizeof(int32_t));
  EXPECT_THAT(dst, ElementsAre(-1, 11, 12,   //
                               -1, 21, 22,   //
                               -1, -1, -1));
}

TEST(CopyBoxTest, AnEmptyExtentCopiesNothing) {
  const std::vector<int32_t> src(12, 7);
  std::vector<int32_t> dst(12, -1);
  CopyBox(src.data(), {3, 4}, {0, 0}, dst.data(), {3, 4}, {0, 0}, {0, 4}, sizeof(int32_t));
  CopyBox(src.data(), {3, 4}, {0, 0}, dst.data(), {3, 4}, {0, 0}, {3, 0}, sizeof(int32_t));
  EXPECT_EQ(dst, std::vector<int32_t>(12, -1));
}

TEST(CopyBoxTest, MatchesANaiveCopyForRandomBoxesOfRankOneToThree) {
  std::mt19937 rng(1234);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t element_sizes[] = {1, 2, 4, 8};
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + trial % 3;
    const int64_t element_bytes = element_sizes[uniform(0, 3)];
    std::vector<int64_t> extent(rank), src_dims(rank), dst_dims(rank), src_offset(rank),
        dst_offset(rank);
    for (int i = 0; i < rank; ++i) {
      extent[i] = uniform(1, 5);
      src_dims[i] = extent[i] + uniform(0, 3);
      dst_dims[i] = extent[i] + uniform(0, 3);
      src_offset[i] = uniform(0, src_dims[i] - extent[i]);
      dst_offset[i] = uniform(0, dst_dims[i] - extent[i]);
    }
    std::vector<uint8_t> src(static_cast<size_t>(Product(src_dims) * element_bytes));
    for (uint8_t& b : src) b = static_cast<uint8_t>(uniform(0, 255));
    std::vector<uint8_t> expected(static_cast<size_t>(Product(dst_dims) * element_bytes), 0xAB);
    std::vector<uint8_t> actual = expected;
    NaiveCopyBox(src, src_dims, src_offset, expected, dst_dims, dst_offset, extent,
                 element_bytes);
    CopyBox(src.data(), src_dims, src_offset, actual.data(), dst_dims, dst_offset, extent,
            element_bytes);
    ASSERT_EQ(actual, expected) << "trial " << trial << " rank " << rank;
  }
}

TEST(CopyBoxTest, CopiesAWholeRankThreeArray) {
  const std::vector<int64_t> dims = {2, 3, 4};
  std::vector<float> src(24);
  for (int i = 0; i < 24; ++i) src[i] = static_cast<float>(i);
  std::vector<float> dst(24, -1.f);
  CopyBox(src.data(), dims, {0, 0, 0}, dst.data(), dims, {0, 0, 0}, dims, sizeof(float));
  EXPECT_EQ(dst, src);
}

// ---------------------------------------------------------------------------
// Intersect / IsEmpty

TEST(BoxTest, IntersectOfOverlappingBoxesIsTheOverlap) {
  const std::vector<Range> a = {{0, 4}, {2, 6}};
  const std::vector<Range> b = {{2, 8}, {0, 3}};
  const std::vector<Range> i = Intersect(a, b);
  EXPECT_THAT(i, ElementsAre(Range{2, 4}, Range{2, 3}));
  EXPECT_FALSE(IsEmpty(i));
  EXPECT_EQ(Intersect(b, a), i);
}

TEST(BoxTest, IntersectOfContainedBoxIsTheInnerBox) {
  const std::vector<Range> outer = {{0, 10}, {0, 10}, {0, 10}};
  const std::vector<Range> inner = {{1, 2}, {3, 7}, {0, 10}};
  EXPECT_EQ(Intersect(outer, inner), inner);
}

TEST(BoxTest, DisjointBoxesIntersectInAnEmptyBox) {
  const std::vector<Range> a = {{0, 2}, {0, 2}};
  const std::vector<Range> b = {{5, 8}, {0, 2}};
  const std::vector<Range> i = Intersect(a, b);
  EXPECT_TRUE(IsEmpty(i));
  for (const Range& r : i) EXPECT_GE(r.size(), 0);
}

TEST(BoxTest, BoxesThatOnlyTouchIntersectInAnEmptyBox) {
  const std::vector<Range> a = {{0, 4}, {0, 4}};
  const std::vector<Range> b = {{0, 4}, {4, 8}};
  EXPECT_TRUE(IsEmpty(Intersect(a, b)));
}

TEST(BoxTest, IsEmptyWhenAnyDimensionIsEmpty) {
  EXPECT_FALSE(IsEmpty(std::vector<Range>{{0, 1}, {3, 4}}));
  EXPECT_TRUE(IsEmpty(std::vector<Range>{{0, 1}, {3, 3}}));
  EXPECT_TRUE(IsEmpty(std::vector<Range>{{2, 2}}));
  // A rank-0 box is one element.
  EXPECT_FALSE(IsEmpty(std::vector<Range>{}));
}

// ---------------------------------------------------------------------------
// Topology

// Island 0: host 0 (devices 0, 1), host 1 (device 2). Island 1: host 2 (device 3).
Topology TwoIslands() {
  Topology t;
  t.AddIsland(IslandId(0));
  t.AddIsland(IslandId(1));
  t.AddHost(HostId(0), IslandId(0));
  t.AddHost(HostId(1), IslandId(0));
  t.AddHost(HostId(2), IslandId(1));
  t.AddDevice(DeviceId(0), HostId(0), 1000);
  t.AddDevice(DeviceId(1), HostId(0), 1000);
  t.AddDevice(DeviceId(2), HostId(1), 2000);
  t.AddDevice(DeviceId(3), HostId(2), 3000);
  return t;
}

TEST(TopologyTest, DevicesKnowTheirHostIslandPositionAndMemory) {
  const Topology t = TwoIslands();
  EXPECT_EQ(t.num_devices(), 4);
  ASSERT_OK_AND_ASSIGN(DeviceInfo d1, t.device(DeviceId(1)));
  EXPECT_EQ(d1.id, DeviceId(1));
  EXPECT_EQ(d1.host, HostId(0));
  EXPECT_EQ(d1.island, IslandId(0));
  EXPECT_EQ(d1.local_index, 1);
  EXPECT_EQ(d1.memory_bytes, 1000);
  ASSERT_OK_AND_ASSIGN(DeviceInfo d3, t.device(DeviceId(3)));
  EXPECT_EQ(d3.host, HostId(2));
  EXPECT_EQ(d3.island, IslandId(1));
  EXPECT_EQ(d3.local_index, 0);
  EXPECT_EQ(d3.memory_bytes, 3000);
}

TEST(TopologyTest, HostsAndIslandsListTheirMembersInOrder) {
  const Topology t = TwoIslands();
  EXPECT_THAT(t.islands(), ElementsAre(IslandId(0), IslandId(1)));
  ASSERT_OK_AND_ASSIGN(HostInfo h0, t.host(HostId(0)));
  EXPECT_EQ(h0.island, IslandId(0));
  EXPECT_THAT(h0.devices, ElementsAre(DeviceId(0), DeviceId(1)));
  ASSERT_OK_AND_ASSIGN(IslandInfo i0, t.island(IslandId(0)));
  EXPECT_THAT(i0.hosts, ElementsAre(HostId(0), HostId(1)));
  EXPECT_THAT(i0.devices, ElementsAre(DeviceId(0), DeviceId(1), DeviceId(2)));
  ASSERT_OK_AND_ASSIGN(IslandInfo i1, t.island(IslandId(1)));
  EXPECT_THAT(i1.hosts, ElementsAre(HostId(2)));
  EXPECT_THAT(i1.devices, ElementsAre(DeviceId(3)));
}

TEST(TopologyTest, LookupsOfUnknownIdsAreNotFound) {
  const Topology t = TwoIslands();
  EXPECT_THAT(t.device(DeviceId(99)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("device 99")));
  EXPECT_THAT(t.host(HostId(42)), StatusIs(absl::StatusCode::kNotFound, HasSubstr("host 42")));
  EXPECT_THAT(t.island(IslandId(7)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("island 7")));
}

TEST(TopologyTest, RemoveHostRemovesItAndItsDevicesEverywhere) {
  Topology t = TwoIslands();
  ASSERT_OK(t.RemoveHost(HostId(0), "host 0 lost: connection closed"));
  EXPECT_EQ(t.num_devices(), 2);
  EXPECT_THAT(t.host(HostId(0)), StatusIs(absl::StatusCode::kNotFound, HasSubstr("host 0")));
  // Its devices are gone, and a lookup says why.
  EXPECT_THAT(t.device(DeviceId(0)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("device 0 is gone: host 0 lost: connection closed")));
  EXPECT_THAT(t.device(DeviceId(1)), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("device 1")));
  ASSERT_OK_AND_ASSIGN(IslandInfo i0, t.island(IslandId(0)));
  EXPECT_THAT(i0.hosts, ElementsAre(HostId(1)));
  EXPECT_THAT(i0.devices, ElementsAre(DeviceId(2)));
  // The rest is untouched.
  EXPECT_OK(t.device(DeviceId(2)));
  EXPECT_OK(t.device(DeviceId(3)));
  EXPECT_THAT(t.islands(), ElementsAre(IslandId(0), IslandId(1)));
}

TEST(TopologyTest, RemovingAnUnknownHostIsNotFound) {
  Topology t = TwoIslands();
  EXPECT_THAT(t.RemoveHost(HostId(9)), StatusIs(absl::StatusCode::kNotFound, HasSubstr("host 9")));
  ASSERT_OK(t.RemoveHost(HostId(2)));
  EXPECT_THAT(t.RemoveHost(HostId(2)), StatusIs(absl::StatusCode::kNotFound, HasSubstr("host 2")));
  EXPECT_EQ(t.num_devices(), 3);
}

TEST(TopologyTest, AHostCanBeAddedBackAfterRemoval) {
  Topology t = TwoIslands();
  ASSERT_OK(t.RemoveHost(HostId(2)));
  // It was island 1's only host: the island left with it.
  EXPECT_EQ(t.island(IslandId(1)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.islands(), ElementsAre(IslandId(0)));
  t.AddIsland(IslandId(1));
  t.AddHost(HostId(2), IslandId(1));
  t.AddDevice(DeviceId(7), HostId(2), 500);
  ASSERT_OK_AND_ASSIGN(DeviceInfo d7, t.device(DeviceId(7)));
  EXPECT_EQ(d7.local_index, 0);
  EXPECT_EQ(d7.island, IslandId(1));
  ASSERT_OK_AND_ASSIGN(IslandInfo i1, t.island(IslandId(1)));
  EXPECT_THAT(i1.devices, ElementsAre(DeviceId(7)));
}

}  // namespace
}  // namespace causeway
