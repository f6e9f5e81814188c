// The safetensors reader must reject every malformed file with an Error that names the file (and
// the tensor where there is one), and read back what write_safetensors wrote.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

// 8-byte little-endian header length, the header, then `data_bytes` bytes of data.
std::string image(const std::string& header, size_t data_bytes = 0,
                  std::optional<uint64_t> claimed_len = std::nullopt) {
  uint64_t n = claimed_len.value_or(header.size());
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(n >> (8 * i));
  return s + header + std::string(data_bytes, '\x5a');
}

std::string raw_len(uint64_t n) { return image("", 0, n); }

template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << parts[0] << "'";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\n lacks: " << p;
  }
}

std::unique_ptr<SafetensorsFile> parse(const std::string& bytes) {
  return SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                "bad.safetensors");
}

struct Malformed {
  const char* name;
  std::string bytes;
  std::vector<std::string> message;  // substrings, besides the file name
};

std::string nested(int depth) {
  return "{\"w\":" + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') + "}";
}

std::vector<Malformed> malformed_files() {
  const std::string w = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  return {
      {"Empty", "", {"0 bytes", "8-byte header length"}},
      {"SevenBytes", std::string(7, '\0'), {"7 bytes"}},
      {"HeaderLengthMax", raw_len(~0ull), {"18446744073709551615", "limit"}},
      {"HeaderLengthHuge", raw_len(1ull << 40), {"limit"}},
      {"HeaderLargerThanFile", raw_len(200) + "{}", {"header length 200", "runs past the end"}},
      {"HeaderCut", image("{" + w + "}", 0, 100).substr(0, 40), {"runs past the end"}},
      {"HeaderLengthZero", raw_len(0), {"does not start with '{'"}},
      {"NotJson", image("{hello}"), {"not valid UTF-8 JSON"}},
      {"JsonArray", image("[1, 2]"), {"does not start with '{'"}},
      {"TrailingGarbageInHeader", image("{} x"), {"not valid UTF-8 JSON"}},
      {"NulPadding", image(std::string("{}") + '\0' + '\0'), {"NUL byte"}},
      {"NulThenGarbage", image(std::string("{}") + '\0' + "garbage"), {"NUL byte"}},
      {"InvalidUtf8Key", image("{\"w\xff\":{}}"), {"not valid UTF-8 JSON"}},
      {"InvalidUtf8Value", image("{\"__metadata__\":{\"a\":\"\xc3\x28\"}}"), {"UTF-8"}},
      {"LoneSurrogate", image(R"({"__metadata__":{"a":"\ud800"}})"), {"not valid UTF-8 JSON"}},
      {"EntryNotObject", image(R"({"w":5})"), {"tensor 'w'", "not an object"}},
      {"EntryArray", image(R"({"w":[1]})"), {"tensor 'w'", "not an object"}},
      {"MissingDtype",
       image(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "missing 'dtype'"}},
      {"MissingShape",
       image(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "missing 'shape'"}},
      {"MissingOffsets",
       image(R"({"w":{"dtype":"F32","shape":[2]}})", 8),
       {"tensor 'w'", "missing 'data_offsets'"}},
      {"UnknownDtype",
       image(R"({"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "unknown dtype 'F17'"}},
      {"LowercaseDtype",
       image(R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "unknown dtype"}},
      {"UnsupportedDtype",
       image(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "F64", "not supported by nanovllm"}},
      {"DtypeNotString",
       image(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "dtype is not a string"}},
      {"NegativeShape",
       image(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "non-negative integers"}},
      {"FloatShape",
       image(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "non-negative integers"}},
      {"StringShape",
       image(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "non-negative integers"}},
      {"ShapeNotArray",
       image(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "shape is not an array"}},
      {"ShapeOverflow",
       image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "overflows"}},
      {"ShapeTimesDtypeOverflow",
       image(R"({"w":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "overflows"}},
      {"ShapeBeyondInt64",
       image(R"({"w":{"dtype":"BF16","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "non-negative integers"}},
      {"OffsetsReversed",
       image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
       {"tensor 'w'", "[8, 0]", "end before they begin"}},
      {"OffsetsOutOfRange",
       image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
       {"tensor 'w'", "run past the data section (4 bytes)"}},
      {"OffsetsFarOutOfRange",
       image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[1099511627776,1099511627784]}})",
             8),
       {"tensor 'w'", "run past"}},
      {"OffsetsNegative",
       image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8),
       {"tensor 'w'", "non-negative integers"}},
      {"OffsetsOneValue",
       image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", 8),
       {"tensor 'w'", "[begin, end]"}},
      {"OffsetsNotArray",
       image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", 8),
       {"tensor 'w'", "[begin, end]"}},
      {"DataCut", image("{" + w + "}", 5), {"tensor 'w'", "run past the data section (5 bytes)"}},
      {"Overlap",
       image(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           12),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"SameRange",
       image(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
           8),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"EmptyInsideOther",
       image(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
           8),
       {"tensor 'z'", "overlap"}},
      {"Gap",
       image(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           12),
       {"tensor 'b'", "4 unused bytes"}},
      {"DataNotAtZero",
       image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       {"tensor 'w'", "4 unused bytes before"}},
      {"SizeMismatch",
       image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "is 12 bytes", "span 8"}},
      {"DtypeSizeMismatch",
       image(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "is 4 bytes"}},
      {"DuplicateName", image("{" + w + "," + w + "}", 8), {"duplicate key 'w'"}},
      {"DuplicateField",
       image(R"({"w":{"dtype":"F32","dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8),
       {"duplicate key 'dtype'"}},
      {"DuplicateMetadata",
       image(R"({"__metadata__":{},"__metadata__":{}})"),
       {"duplicate key '__metadata__'"}},
      {"TrailingBytes", image("{" + w + "}", 9), {"1 trailing bytes", "'w'"}},
      {"TrailingBytesNoTensors", image("{}", 3), {"3 trailing bytes"}},
      {"MetadataNotObject", image(R"({"__metadata__":"x"})"), {"__metadata__ is not an object"}},
      {"MetadataNotString",
       image(R"({"__metadata__":{"format":1}})"),
       {"__metadata__ value of 'format'"}},
      {"MetadataNull",
       image(R"({"__metadata__":{"format":null}})"),
       {"__metadata__ value of 'format'"}},
      {"DeeplyNested", image(nested(100000)), {"nests deeper than 128 levels"}},
      {"NestedShape", image(nested(20)), {"tensor 'w'", "not an object"}},
  };
}

class MalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedTest, IsRejectedWithAClearError) {
  std::vector<std::string> parts = GetParam().message;
  parts.push_back("bad.safetensors");
  expect_error([&] { parse(GetParam().bytes); }, parts);
}

INSTANTIATE_TEST_SUITE_P(Safetensors, MalformedTest, ::testing::ValuesIn(malformed_files()),
                         [](const auto& info) { return std::string(info.param.name); });

// A unique folder under the system temp dir, removed afterwards.
class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() / ("nanovllm_safetensors_test_" + std::to_string(::getpid()) +
                                        "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_file(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  fs::path dir_;
};

std::vector<uint8_t> f32_bytes(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TensorToWrite f32_tensor(const std::string& name, std::vector<int64_t> shape,
                         std::vector<float> v) {
  return {name, DType::F32, std::move(shape), f32_bytes(std::move(v))};
}

using SafetensorsFileTest = TempDir;

TEST_F(SafetensorsFileTest, RoundTripKeepsNamesDtypesShapesBytesAndMetadata) {
  std::vector<TensorToWrite> tensors = {
      f32_tensor("a.weight", {2, 3}, {1, 2, 3, 4, 5, 6}),
      {"b", DType::BF16, {3}, {1, 2, 3, 4, 5, 6}},
      {"c", DType::I64, {1}, {7, 0, 0, 0, 0, 0, 0, 0}},
      {"d", DType::F16, {1, 1}, {0, 0x3c}},
      {"e", DType::I32, {}, {9, 0, 0, 0}},
  };
  write_safetensors(path("m.safetensors"), tensors, {{"format", "pt"}, {"note", "é ü"}});
  auto f = SafetensorsFile::open(path("m.safetensors"));
  EXPECT_EQ(f->path(), path("m.safetensors"));
  ASSERT_EQ(f->tensors().size(), tensors.size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "é ü");
  for (const TensorToWrite& t : tensors) {
    const SafetensorsTensor* r = f->find(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    EXPECT_EQ(r->dtype, t.dtype);
    EXPECT_EQ(r->shape, t.shape);
    ASSERT_EQ(r->nbytes, t.bytes.size());
    EXPECT_EQ(std::memcmp(r->data, t.bytes.data(), r->nbytes), 0) << t.name;
  }
  EXPECT_EQ(f->find("e")->numel(), 1);
  EXPECT_EQ(f->find("a.weight")->numel(), 6);
  EXPECT_EQ(f->find("nope"), nullptr);
  // The header is padded so that the data section starts 8-byte aligned.
  std::ifstream in(path("m.safetensors"), std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
}

TEST_F(SafetensorsFileTest, ZeroSizeTensorsAndEmptyFiles) {
  write_safetensors(path("z.safetensors"), {f32_tensor("x", {2}, {1, 2}),
                                            {"empty", DType::BF16, {0}, {}},
                                            {"empty2", DType::F32, {3, 0, 2}, {}},
                                            f32_tensor("y", {1}, {3})});
  auto f = SafetensorsFile::open(path("z.safetensors"));
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->find("empty")->nbytes, 0u);
  EXPECT_EQ(f->find("empty2")->numel(), 0);
  EXPECT_EQ(f->find("empty2")->shape, (std::vector<int64_t>{3, 0, 2}));
  EXPECT_EQ(*reinterpret_cast<const float*>(f->find("y")->data), 3.0f);

  write_safetensors(path("none.safetensors"), {});
  EXPECT_TRUE(SafetensorsFile::open(path("none.safetensors"))->tensors().empty());
  write_safetensors(path("meta.safetensors"), {}, {{"k", "v"}});
  EXPECT_EQ(SafetensorsFile::open(path("meta.safetensors"))->metadata().at("k"), "v");
}

TEST(SafetensorsParse, AcceptsWhatTheReferenceAccepts) {
  // Whitespace padding after the object, unknown fields in an entry, an unaligned header,
  // keys in any order, tensors stored in a different order than the header lists them.
  auto f = parse(image(R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8],"extra":1},)"
                       R"("a":{"data_offsets":[0,4],"shape":[],"dtype":"F32"}}   )",
                       8));
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->find("a")->data + 4, f->find("b")->data);
  EXPECT_TRUE(parse(image("{}"))->tensors().empty());
}

TEST_F(SafetensorsFileTest, OpenNamesTheFile) {
  expect_error([&] { SafetensorsFile::open(path("missing.safetensors")); },
               {"missing.safetensors", "cannot open"});
  expect_error([&] { SafetensorsFile::open(dir_.string()); },
               {dir_.string(), "not a regular file"});
  write_file("short.safetensors", "abc");
  expect_error([&] { SafetensorsFile::open(path("short.safetensors")); },
               {"short.safetensors", "3 bytes"});
  write_file("empty.safetensors", "");
  expect_error([&] { SafetensorsFile::open(path("empty.safetensors")); }, {"empty.safetensors"});
  write_file("trail.safetensors", image("{}", 1));
  expect_error([&] { SafetensorsFile::open(path("trail.safetensors")); },
               {"trail.safetensors", "trailing"});
}

TEST_F(SafetensorsFileTest, WriterChecksItsInput) {
  expect_error(
      [&] {
        write_safetensors(path("w.safetensors"), {{"a", DType::F32, {2}, {1, 2}}});
      },
      {"w.safetensors", "tensor 'a'", "needs 8"});
  expect_error(
      [&] {
        write_safetensors(path("w.safetensors"),
                          {f32_tensor("a", {1}, {1}), f32_tensor("a", {1}, {1})});
      },
      {"tensor 'a'", "duplicate"});
  {
    SafetensorsWriter writer(path("partial.safetensors"), {{"a", DType::F32, {4}}});
    writer.write("abcd", 4);
    expect_error([&] { writer.write("0123456789abcdef", 16); },
                 {"partial.safetensors", "more than"});
  }  // never finished: removed
  EXPECT_FALSE(fs::exists(path("partial.safetensors")));
  SafetensorsWriter streamed(path("s.safetensors"),
                             {{"a", DType::F32, {2}}, {"b", DType::I32, {1}}});
  const float a[2] = {1.5f, -2};
  const int32_t b = 42;
  streamed.write(a, 4);
  streamed.write(a + 1, 4);
  streamed.write(&b, 4);
  streamed.finish();
  auto f = SafetensorsFile::open(path("s.safetensors"));
  EXPECT_EQ(reinterpret_cast<const float*>(f->find("a")->data)[1], -2.0f);
  EXPECT_EQ(*reinterpret_cast<const int32_t*>(f->find("b")->data), 42);
}

// ---- Checkpoint folders ----

using CheckpointTest = TempDir;

TEST_F(CheckpointTest, SingleFileGetChecksShape) {
  write_safetensors(path("model.safetensors"), {f32_tensor("w", {2, 2}, {1, 2, 3, 4})});
  Checkpoint ckpt(dir_.string());
  EXPECT_EQ(ckpt.names(), std::vector<std::string>{"w"});
  EXPECT_EQ(ckpt.get("w", {2, 2}).numel(), 4);
  EXPECT_EQ(ckpt.file_of("w"), path("model.safetensors"));
  EXPECT_EQ(ckpt.find("nope"), nullptr);
  expect_error([&] { ckpt.get("w", {4}); },
               {path("model.safetensors"), "tensor 'w'", "shape [2, 2]", "expected [4]"});
  expect_error(
      [&] {
        ckpt.get("lm_head.weight", {2, 2});
      },
      {dir_.string(), "tensor 'lm_head.weight' not found", "model.safetensors"});
}

TEST_F(CheckpointTest, EmptyFolderAndNotAFolder) {
  expect_error([&] { Checkpoint c(dir_.string()); },
               {dir_.string(), "no model.safetensors or model.safetensors.index.json"});
  expect_error([&] { Checkpoint c(path("nowhere")); }, {"nowhere", "not a directory"});
}

TEST_F(CheckpointTest, MalformedFileInsideFolderNamesTheFile) {
  write_file("model.safetensors",
             image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  expect_error([&] { Checkpoint c(dir_.string()); },
               {path("model.safetensors"), "tensor 'w'", "is 12 bytes"});
}

void write_index(const std::string& p, const std::string& weight_map) {
  std::ofstream(p) << R"({"metadata":{"total_size":16},"weight_map":)" << weight_map << "}";
}

TEST_F(CheckpointTest, ShardedLoads) {
  write_safetensors(path("model-00001-of-00002.safetensors"), {f32_tensor("a", {1}, {1})});
  write_safetensors(path("model-00002-of-00002.safetensors"),
                    {f32_tensor("b", {2}, {2, 3}), f32_tensor("c", {1}, {4})});
  write_index(path("model.safetensors.index.json"),
              R"({"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors",)"
              R"("c":"model-00002-of-00002.safetensors"})");
  Checkpoint ckpt(dir_.string());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ckpt.file_of("b"), path("model-00002-of-00002.safetensors"));
  EXPECT_EQ(*reinterpret_cast<const float*>(ckpt.get("c", {1}).data), 4.0f);
}

TEST_F(CheckpointTest, IndexPointingToAMissingShard) {
  write_safetensors(path("model-00001-of-00002.safetensors"), {f32_tensor("a", {1}, {1})});
  write_index(path("model.safetensors.index.json"),
              R"({"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"})");
  expect_error([&] { Checkpoint c(dir_.string()); },
               {"model.safetensors.index.json", "weight_map['b']",
                "model-00002-of-00002.safetensors", "does not exist"});
}

TEST_F(CheckpointTest, TensorNotInTheShardTheIndexNames) {
  write_safetensors(path("s1.safetensors"), {f32_tensor("a", {1}, {1})});
  write_safetensors(path("s2.safetensors"), {f32_tensor("b", {1}, {1})});
  write_index(path("model.safetensors.index.json"),
              R"({"a":"s2.safetensors","b":"s2.safetensors"})");
  expect_error([&] { Checkpoint c(dir_.string()); },
               {path("s2.safetensors"), "tensor 'a'", "not in that file"});
}

TEST_F(CheckpointTest, TensorInTwoShards) {
  write_safetensors(path("s1.safetensors"), {f32_tensor("a", {1}, {1})});
  write_safetensors(path("s2.safetensors"), {f32_tensor("a", {1}, {1})});
  write_index(path("model.safetensors.index.json"),
              R"({"a":"s1.safetensors","b":"s2.safetensors"})");
  expect_error([&] { Checkpoint c(dir_.string()); },
               {"tensor 'a'", "s1.safetensors", "s2.safetensors"});
}

TEST_F(CheckpointTest, BadIndexFiles) {
  write_safetensors(path("s1.safetensors"), {f32_tensor("a", {1}, {1})});
  const std::string index = path("model.safetensors.index.json");
  write_file("model.safetensors.index.json", "{not json");
  expect_error([&] { Checkpoint c(dir_.string()); }, {index, "not valid JSON"});
  write_file("model.safetensors.index.json", R"({"metadata":{}})");
  expect_error([&] { Checkpoint c(dir_.string()); }, {index, "weight_map"});
  write_index(index, "{}");
  expect_error([&] { Checkpoint c(dir_.string()); }, {index, "lists no tensors"});
  write_index(index, R"({"a":"../s1.safetensors"})");
  expect_error([&] { Checkpoint c(dir_.string()); }, {index, "weight_map['a']", "not a file name"});
  write_index(index, R"({"a":7})");
  expect_error([&] { Checkpoint c(dir_.string()); }, {index, "weight_map['a']"});
}

}  // namespace
}  // namespace nanovllm
