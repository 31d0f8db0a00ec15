// engine::find_model_file: where a bare model name is found (the callers' folders, the checkout's
// models/, the installed share/turbokv/models/, TURBOKV_MODELS_DIR), and an error that names
// every folder it looked in.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "engine/model/model_files.hpp"
#include "turbokv/error.hpp"

namespace fs = std::filesystem;
using turbokv::engine::find_model_file;
using turbokv::engine::model_search_dirs;

namespace {

// A scratch folder with the environment variable saved and restored around each test.
class ModelFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("turbokv_model_files_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    if (const char* v = std::getenv("TURBOKV_MODELS_DIR")) saved_ = v;
    ::unsetenv("TURBOKV_MODELS_DIR");
  }
  void TearDown() override {
    if (saved_) ::setenv("TURBOKV_MODELS_DIR", saved_->c_str(), 1);
    else ::unsetenv("TURBOKV_MODELS_DIR");
    fs::remove_all(dir_);
  }
  fs::path touch(const fs::path& folder, const std::string& name) {
    fs::create_directories(folder);
    std::ofstream(folder / name) << "x";
    return folder / name;
  }
  fs::path dir_;
  std::optional<std::string> saved_;
};

const fs::path kCheckoutModels = fs::path(TURBOKV_SOURCE_DIR) / "models";

}  // namespace

TEST_F(ModelFiles, TheDefaultModelIsFoundInTheCheckoutWithNoEnvironment) {
  const fs::path found = find_model_file(turbokv::engine::kDefaultModel);
  EXPECT_EQ(fs::weakly_canonical(found), fs::weakly_canonical(kCheckoutModels / turbokv::engine::kDefaultModel));
}

TEST_F(ModelFiles, SearchOrderIsCallersThenCheckoutThenInstalledThenEnvironment) {
  ::setenv("TURBOKV_MODELS_DIR", (dir_ / "env").c_str(), 1);
  const auto dirs = model_search_dirs({(dir_ / "first").string()});
  ASSERT_GE(dirs.size(), 4u);
  EXPECT_EQ(dirs.front(), (dir_ / "first").string());
  EXPECT_EQ(dirs[1], kCheckoutModels.string());
  EXPECT_EQ(dirs.back(), (dir_ / "env").string());
  bool installed = false;
  for (size_t i = 2; i + 1 < dirs.size(); ++i) installed |= dirs[i].ends_with("share/turbokv/models");
  EXPECT_TRUE(installed) << "no share/turbokv/models between the checkout and the environment";
}

TEST_F(ModelFiles, EnvironmentFolderServesNamesTheCheckoutLacks) {
  const fs::path model = touch(dir_ / "env", "only-in-env.bin");
  ::setenv("TURBOKV_MODELS_DIR", (dir_ / "env").c_str(), 1);
  EXPECT_EQ(find_model_file("only-in-env.bin"), model.string());
}

TEST_F(ModelFiles, CallersFoldersComeFirst) {
  const fs::path mine = touch(dir_ / "first", turbokv::engine::kDefaultModel);
  EXPECT_EQ(find_model_file(turbokv::engine::kDefaultModel, {(dir_ / "first").string()}), mine.string());
}

TEST_F(ModelFiles, PathsAreReturnedAsGiven) {
  EXPECT_EQ(find_model_file("no/such/dir/model.gguf"), "no/such/dir/model.gguf");
  const fs::path here = touch(dir_, "here.bin");
  EXPECT_EQ(find_model_file(here.string()), here.string());
}

TEST_F(ModelFiles, AFolderIsNotAModel) {
  fs::create_directories(dir_ / "env" / "folder.bin");
  ::setenv("TURBOKV_MODELS_DIR", (dir_ / "env").c_str(), 1);
  EXPECT_THROW(find_model_file("folder.bin"), turbokv::Error);
}

TEST_F(ModelFiles, MissingModelErrorNamesEveryFolderAndTheVariable) {
  try {
    find_model_file("no-such-model.bin");
    FAIL() << "expected an error";
  } catch (const turbokv::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no-such-model.bin"), std::string::npos) << what;
    EXPECT_NE(what.find(kCheckoutModels.string()), std::string::npos) << what;
    EXPECT_NE(what.find("share/turbokv/models"), std::string::npos) << what;
    EXPECT_NE(what.find("TURBOKV_MODELS_DIR"), std::string::npos) << what;
  }
  ::setenv("TURBOKV_MODELS_DIR", (dir_ / "env").c_str(), 1);
  try {
    find_model_file("no-such-model.bin");
    FAIL() << "expected an error";
  } catch (const turbokv::Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "env").string()), std::string::npos) << e.what();
  }
}
