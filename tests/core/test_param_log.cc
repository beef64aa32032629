// The parameter table and the log sink: every row is complete and its
// default parses, values come from the environment and are validated, and
// messages reach an installed sink at the levels it asks for. Rank-local
// (no communication), so it runs the same at every process count.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

extern "C" {
#include <pg_sparse/log.h>
#include <pg_sparse/param.h>
#include <pg_sparse/status.h>
}

namespace {

struct Captured {
  std::vector<std::pair<pgs_log_level_t, std::string>> lines;
  std::vector<std::string> subsystems;
};

void capture(void *ctx, pgs_log_level_t level, const char *subsystem,
             const char *msg) {
  static_cast<Captured *>(ctx)->lines.emplace_back(level, msg);
  static_cast<Captured *>(ctx)->subsystems.emplace_back(subsystem);
}

// Sets an environment variable for one test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Installs a capturing sink for one test and removes it afterwards.
class ScopedSink {
 public:
  explicit ScopedSink(pgs_log_level_t level) : sink_{capture, &got, level} {
    pgs_log_set_sink(&sink_);
  }
  ~ScopedSink() { pgs_log_set_sink(nullptr); }
  Captured got;

 private:
  pgs_log_sink_t sink_;
};

TEST(Param, EveryRowIsCompleteAndItsDefaultParses) {
  for (int i = 0; i < PGS_PARAM_COUNT; ++i) {
    auto id = static_cast<pgs_param_id_t>(i);
    const pgs_param_info_t *p = pgs_param_info(id);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(std::string(p->name).rfind("PG_SPARSE_", 0), 0u) << p->name;
    EXPECT_GT(std::string(p->doc).size(), 10u) << p->name;
    pgs_param_id_t back;
    ASSERT_EQ(pgs_param_lookup(p->name, &back), PGS_OK);
    EXPECT_EQ(back, id);
    if (getenv(p->name) != nullptr) continue;  // the caller's value wins
    int64_t iv;
    double fv;
    const char *sv;
    switch (p->type) {
      case PGS_PARAM_INT: EXPECT_EQ(pgs_param_int(id, &iv), PGS_OK); break;
      case PGS_PARAM_FLOAT: EXPECT_EQ(pgs_param_float(id, &fv), PGS_OK); break;
      case PGS_PARAM_STRING:
        ASSERT_EQ(pgs_param_string(id, &sv), PGS_OK);
        EXPECT_STREQ(sv, p->default_value);
        break;
    }
  }
  EXPECT_EQ(pgs_param_info(PGS_PARAM_COUNT), nullptr);
  pgs_param_id_t none;
  EXPECT_EQ(pgs_param_lookup("PG_SPARSE_NO_SUCH", &none), PGS_ERR_INVALID);
}

TEST(Param, EnvironmentValueIsReadAndValidated) {
  double v = 0;
  {
    ScopedEnv e("PG_SPARSE_OKTOPK_NUDGE_UP", "1.25");
    EXPECT_TRUE(pgs_param_is_set(PGS_PARAM_OKTOPK_NUDGE_UP));
    ASSERT_EQ(pgs_param_float(PGS_PARAM_OKTOPK_NUDGE_UP, &v), PGS_OK);
    EXPECT_DOUBLE_EQ(v, 1.25);
  }
  ScopedSink sink(PGS_LOG_ERROR);
  for (const char *bad : {"abc", "1.5x", "", "0.5", "3", "nan"}) {
    ScopedEnv e("PG_SPARSE_OKTOPK_NUDGE_UP", bad);
    EXPECT_EQ(pgs_param_float(PGS_PARAM_OKTOPK_NUDGE_UP, &v), PGS_ERR_INVALID)
        << bad;
  }
  ASSERT_EQ(sink.got.lines.size(), 6u);
  EXPECT_NE(sink.got.lines[0].second.find("PG_SPARSE_OKTOPK_NUDGE_UP=\"abc\""),
            std::string::npos);
  EXPECT_EQ(sink.got.lines[0].first, PGS_LOG_ERROR);
  EXPECT_EQ(sink.got.subsystems[0], "param");
}

TEST(Param, IntegersRejectFractionsAndStringsTheirNonChoices) {
  int64_t n = 0;
  {
    ScopedEnv e("PG_SPARSE_MPI_CANCEL_POLLS", "12");
    ASSERT_EQ(pgs_param_int(PGS_PARAM_MPI_CANCEL_POLLS, &n), PGS_OK);
    EXPECT_EQ(n, 12);
  }
  ScopedSink quiet(PGS_LOG_ERROR);
  {
    ScopedEnv e("PG_SPARSE_MPI_CANCEL_POLLS", "1.5");
    EXPECT_EQ(pgs_param_int(PGS_PARAM_MPI_CANCEL_POLLS, &n), PGS_ERR_INVALID);
  }
  {
    ScopedEnv e("PG_SPARSE_MPI_CANCEL_POLLS", "0");  // under the minimum
    EXPECT_EQ(pgs_param_int(PGS_PARAM_MPI_CANCEL_POLLS, &n), PGS_ERR_INVALID);
  }
  const char *s = nullptr;
  {
    ScopedEnv e("PG_SPARSE_TRANSPORT", "gloo");
    ASSERT_EQ(pgs_param_string(PGS_PARAM_TRANSPORT, &s), PGS_OK);
    EXPECT_STREQ(s, "gloo");
  }
  for (const char *bad : {"glo", "gloo|mpi", "mpix", ""}) {
    ScopedEnv e("PG_SPARSE_TRANSPORT", bad);
    EXPECT_EQ(pgs_param_string(PGS_PARAM_TRANSPORT, &s), PGS_ERR_INVALID)
        << bad;
  }
  // A getter of the wrong type is refused, not reinterpreted.
  EXPECT_EQ(pgs_param_int(PGS_PARAM_TRANSPORT, &n), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_param_string(PGS_PARAM_MPI_CANCEL_POLLS, &s), PGS_ERR_INVALID);
}

TEST(Param, TextAndTypeBlindCheck) {
  ScopedSink quiet(PGS_LOG_ERROR);
  {
    ScopedEnv e("PG_SPARSE_TRANSPORT", "mpix");
    EXPECT_STREQ(pgs_param_text(PGS_PARAM_TRANSPORT), "mpix");
    EXPECT_EQ(pgs_param_check(PGS_PARAM_TRANSPORT), PGS_ERR_INVALID);
  }
  {
    ScopedEnv e("PG_SPARSE_MPI_CANCEL_POLLS", "2.5");
    EXPECT_EQ(pgs_param_check(PGS_PARAM_MPI_CANCEL_POLLS), PGS_ERR_INVALID);
  }
  {
    ScopedEnv e("PG_SPARSE_OKTOPK_NUDGE_UP", "1.5");
    EXPECT_EQ(pgs_param_check(PGS_PARAM_OKTOPK_NUDGE_UP), PGS_OK);
  }
  EXPECT_EQ(pgs_param_check(PGS_PARAM_COUNT), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_param_text(PGS_PARAM_COUNT), nullptr);
}

TEST(Log, SinkGetsItsLevelsOnly) {
  ScopedSink sink(PGS_LOG_INFO);
  EXPECT_TRUE(pgs_log_enabled(PGS_LOG_INFO));
  EXPECT_FALSE(pgs_log_enabled(PGS_LOG_DEBUG));
  pgs_log(PGS_LOG_WARN, "test", "w %d", 1);
  pgs_log(PGS_LOG_INFO, "other", "i %s", "two");
  pgs_log(PGS_LOG_DEBUG, "test", "d");
  ASSERT_EQ(sink.got.lines.size(), 2u);
  EXPECT_EQ(sink.got.lines[0].first, PGS_LOG_WARN);
  EXPECT_EQ(sink.got.lines[0].second, "w 1");
  EXPECT_EQ(sink.got.lines[1].second, "i two");
  EXPECT_EQ(sink.got.subsystems[0], "test");
  EXPECT_EQ(sink.got.subsystems[1], "other");
}

TEST(Log, LongMessagesAreCutNotOverrun) {
  ScopedSink sink(PGS_LOG_DEBUG);
  std::string big(5000, 'x');
  pgs_log(PGS_LOG_ERROR, "test", "%s", big.c_str());
  ASSERT_EQ(sink.got.lines.size(), 1u);
  EXPECT_EQ(sink.got.lines[0].second.size(), 1023u);
}

TEST(Log, LevelNames) {
  EXPECT_STREQ(pgs_log_level_name(PGS_LOG_ERROR), "error");
  EXPECT_STREQ(pgs_log_level_name(PGS_LOG_DEBUG), "debug");
  EXPECT_EQ(pgs_log_level_name(static_cast<pgs_log_level_t>(9)), nullptr);
}

}  // namespace
