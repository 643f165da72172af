// One tensor table: a Hugging Face and an MLX golden checkpoint converted by `convert`, and a
// model made by `synth`, all bind through gemma4's table, and every entry of the table is found
// in each with the shape and type the table gives (nothing more in the core, nothing missing).
#include <gtest/gtest.h>
#include <unistd.h>

#include "base/file.h"
#include "format/model_dir.h"
#include "install/convert.h"
#include "install/synth.h"
#include "model/gemma4_table.h"
#include "model/gemma4_weights.h"

namespace rw {
namespace {

using gemma4::Role;
using gemma4::TensorRow;

std::string Scratch(const std::string& name) {
  return JoinPath(REDWING_BUILD_DIR, fmt::format("test_tmp/gemma4_table/{}.{}", name, ::getpid()));
}

// The golden fixture with the most layers (sliding and K=V full ones).
std::string GoldenCheckpoint(const std::string& kind) {
  return JoinPath(REDWING_SOURCE_DIR, "tests/fixtures/golden/moe_h64_l12_k4_g32/" + kind);
}

std::string Convert(const std::string& kind) {
  ConvertOptions o;
  o.source_dir = GoldenCheckpoint(kind);
  o.out_dir = Scratch("convert_" + kind);
  o.quantize = "keep";
  o.overwrite = true;
  Status st = ConvertCheckpoint(o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return o.out_dir;
}

std::string Synth() {
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = 7;
  o.out_dir = Scratch("synth");
  o.overwrite = true;
  Status st = SynthesizeModel(o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return o.out_dir;
}

// Checks one bound tensor against its row: found under the table's name, the table's shape, a
// float vector or a linear of the expected kind.
void ExpectRow(const TensorDesc* bound, const CoreFile& core, const TensorRow& row,
               const std::string& name, const std::vector<int64_t>& shape, bool affine_linears) {
  ASSERT_NE(bound, nullptr) << name;
  EXPECT_EQ(bound, core.Find(name)) << name;
  EXPECT_EQ(bound->shape, shape) << name;
  if (row.role == Role::kVector)
    EXPECT_TRUE(bound->type == TensorType::kBf16 || bound->type == TensorType::kF32) << name;
  else
    EXPECT_EQ(bound->type == TensorType::kAffine, affine_linears) << name;
}

// Binds `dir` and walks the whole table.
void ExpectBindsThroughTable(const std::string& dir, bool affine_linears) {
  auto md = ModelDir::Open(dir);
  ASSERT_TRUE(md.ok()) << md.status().ToString();
  const ModelConfig& c = md->config();
  const CoreFile& core = md->core();
  auto w = BindGemma4Weights(c, core);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->layers.size(), static_cast<size_t>(c.num_layers));

  size_t bound = 0, absent = 0;
  for (size_t k = 0; k < std::size(gemma4::kModelTensors); ++k) {
    const TensorRow& row = gemma4::kModelTensors[k];
    ExpectRow(w->Get(k), core, row, std::string(row.name), gemma4::Shape(row, c, -1),
              affine_linears);
    ++bound;
  }
  for (int l = 0; l < c.num_layers; ++l) {
    for (size_t k = 0; k < std::size(gemma4::kLayerTensors); ++k) {
      const TensorRow& row = gemma4::kLayerTensors[k];
      const std::string name = gemma4::LayerName(row, l);
      if (!gemma4::Present(row, c, l)) {
        EXPECT_EQ(w->layers[l].Get(k), nullptr) << name;
        EXPECT_EQ(core.Find(name), nullptr) << name;
        ++absent;
        continue;
      }
      ExpectRow(w->layers[l].Get(k), core, row, name, gemma4::Shape(row, c, l), affine_linears);
      ++bound;
    }
  }
  // Every core tensor is a table entry, and the K=V full layers leave some rows absent.
  EXPECT_EQ(core.tensors().size(), bound);
  EXPECT_GT(absent, 0u);

  ASSERT_TRUE(c.enable_moe);
  const ExpertIndex* idx = md->experts();
  ASSERT_NE(idx, nullptr);
  for (int l = 0; l < c.num_layers; ++l) {
    const ExpertLayout& layout = idx->layers[l].layout;
    const TensorDesc* parts[] = {&layout.gate, &layout.up, &layout.down};
    for (size_t k = 0; k < std::size(gemma4::kExpertTensors); ++k) {
      const gemma4::ExpertRow& row = gemma4::kExpertTensors[k];
      EXPECT_EQ(parts[k]->name, row.name);
      EXPECT_EQ(parts[k]->shape, gemma4::Shape(row, c)) << row.name;
      EXPECT_EQ(parts[k]->type == TensorType::kAffine, affine_linears) << row.name;
    }
    EXPECT_TRUE(ValidateExpertLayout(c, layout, dir).ok());
  }
}

TEST(Gemma4Table, HfMlxAndSynthBindThroughOneTable) {
  const std::string dirs[] = {Convert("hf"), Convert("mlx"), Synth()};
  ExpectBindsThroughTable(dirs[0], /*affine_linears=*/false);
  ExpectBindsThroughTable(dirs[1], /*affine_linears=*/true);
  ExpectBindsThroughTable(dirs[2], /*affine_linears=*/true);
  for (const std::string& d : dirs) (void)RemoveAll(d);
}

}  // namespace
}  // namespace rw
