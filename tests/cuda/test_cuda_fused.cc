// The fused pass (accumulate_select), its undo, shift_idx, locate and the
// host-sync counter of the CUDA table, against the host table.
#include "cuda_test_util.h"

namespace cuda_test {
namespace {

class CudaFused : public CudaTest {};

std::vector<float> with_bad(size_t n, uint64_t seed) {
  std::vector<float> g = normal(n, seed);
  for (size_t i = 0; i < n; i += 97) g[i] = 0.0f;
  if (n > 50) add_nonfinite(g, seed + 1, n / 1000 + 1);
  return g;
}

// The host's list length of accumulate_select(r0, g, thr): where the device
// tests set their caps.
size_t host_list_length(const std::vector<float> &r0,
                        const std::vector<float> &g, float thr) {
  const size_t n = r0.size();
  std::vector<float> probe = r0;
  std::vector<int32_t> pi(n + 1);
  std::vector<float> pv(n + 1);
  int64_t m = 0, bad = 0;
  EXPECT_EQ(cpu()->accumulate_select(cpu(), probe.data(), g.data(), n, thr,
                                     pi.data(), pv.data(), n, &m, &bad),
            PGS_OK);
  return static_cast<size_t>(m);
}

TEST_F(CudaFused, AccumulateSelectMatchesHost) {
  for (size_t n : sizes()) {
    for (float thr : {0.5f, 2.5f, INFINITY}) {
      const std::vector<float> r0 = normal(n, 3 + n);
      const std::vector<float> g = with_bad(n, 5 + n);
      std::vector<float> rh = r0;
      // Room for every pick on the host: the count sets the device's cap.
      std::vector<int32_t> ih(n + 1);
      std::vector<float> vh(n + 1);
      int64_t ch = 0, bh = 0;
      ASSERT_EQ(cpu()->accumulate_select(cpu(), rh.data(), g.data(), n, thr,
                                         ih.data(), vh.data(), n, &ch, &bh),
                PGS_OK);
      for (size_t cap :
           {static_cast<size_t>(ch), static_cast<size_t>(ch / 2)}) {
        Dev<float> r(r0), gd(g);
        Dev<int32_t> idx(cap + 1);
        Dev<float> val(cap + 1);
        int64_t c = -1, b = -1;
        ASSERT_EQ(gpu()->accumulate_select(gpu(), r.get(), gd.get(), n, thr,
                                           idx.get(), val.get(), cap, &c, &b),
                  PGS_OK);
        EXPECT_TRUE(same(r.host(), rh)) << "n " << n << " thr " << thr;
        EXPECT_EQ(c, ch);
        EXPECT_EQ(b, bh);
        if (static_cast<size_t>(ch) <= cap && ch > 0) {
          ih.resize(ch);
          vh.resize(ch);
          EXPECT_TRUE(same(idx.host(0, ch), ih));
          EXPECT_TRUE(same(val.host(0, ch), vh));
          ih.resize(n + 1);
          vh.resize(n + 1);
        } else if (cap > 0) {
          // The list did not fit: its first cap entries are written.
          const std::vector<int32_t> ic(ih.begin(), ih.begin() + cap);
          const std::vector<float> vc(vh.begin(), vh.begin() + cap);
          EXPECT_TRUE(same(idx.host(0, cap), ic)) << "n " << n;
          EXPECT_TRUE(same(val.host(0, cap), vc)) << "n " << n;
        }
      }
      // The undo on both.
      Dev<float> r(rh), gd(g);
      ASSERT_EQ(gpu()->unaccumulate(gpu(), r.get(), gd.get(), n), PGS_OK);
      ASSERT_EQ(cpu()->unaccumulate(cpu(), rh.data(), g.data(), n), PGS_OK);
      EXPECT_TRUE(same(r.host(), rh)) << "undo, n " << n;
    }
  }
}

// accumulate_kth against the host table, in one wait for the device: the
// list, its length and its k-th largest |val| where it holds it whole.
TEST_F(CudaFused, AccumulateKthMatchesHostInOneWait) {
  for (size_t n : sizes()) {
    for (float thr : {0.5f, 2.5f}) {
      const std::vector<float> r0 = normal(n, 13 + n);
      const std::vector<float> g = with_bad(n, 15 + n);
      const size_t mm = host_list_length(r0, g, thr);
      for (size_t cap : {mm, mm / 2, mm + 7}) {
        for (size_t k : {size_t{1}, mm / 3 + 1, mm, mm + 1}) {
          std::vector<float> rh = r0;
          std::vector<int32_t> ih(cap + 1);
          std::vector<float> vh(cap + 1);
          pgs_fused_t want{}, got{};
          ASSERT_EQ(cpu()->accumulate_kth(cpu(), rh.data(), g.data(), n, thr,
                                          ih.data(), vh.data(), cap, k, &want),
                    PGS_OK);
          Dev<float> r(r0), gd(g);
          Dev<int32_t> idx(cap + 1);
          Dev<float> val(cap + 1);
          const uint64_t s0 = gpu()->host_syncs(gpu());
          ASSERT_EQ(gpu()->accumulate_kth(gpu(), r.get(), gd.get(), n, thr,
                                          idx.get(), val.get(), cap, k, &got),
                    PGS_OK);
          EXPECT_LE(gpu()->host_syncs(gpu()) - s0, 1u) << "one wait";
          const std::string at =
              "n " + std::to_string(n) + " thr " + std::to_string(thr) +
              " cap " + std::to_string(cap) + " k " + std::to_string(k);
          EXPECT_TRUE(same(r.host(), rh)) << at;
          EXPECT_EQ(got.count, want.count) << at;
          EXPECT_EQ(got.nonfinite, want.nonfinite) << at;
          EXPECT_EQ(bits_of(got.kth), bits_of(want.kth)) << at;
          EXPECT_EQ(got.n_gt, want.n_gt) << at;
          if (mm <= cap && mm > 0) {
            ih.resize(mm);
            vh.resize(mm);
            EXPECT_TRUE(same(idx.host(0, mm), ih)) << at;
            EXPECT_TRUE(same(val.host(0, mm), vh)) << at;
          }
        }
      }
    }
  }
}

// accumulate_kth's k-th on lists that crowd into few bins: zeros (at a zero
// threshold, so the k-th may be a zero), denormals, one value repeated, and
// a few thousand distinct magnitudes, at lengths up to and past 2^20.
TEST_F(CudaFused, AccumulateKthOfCrowdedListsMatchesHost) {
  for (size_t n : {size_t{1000}, size_t{65537}, size_t{1} << 20,
                   (size_t{1} << 20) + 4099}) {
    if (n > max_n()) continue;
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> r0 = denormals(n, 21 + n);
      for (size_t i = 0; i < n; ++i) {
        if (kind == 1) r0[i] = i % 5 == 0 ? 0.0f : 0.75f;
        if (kind == 2) r0[i] = 1.0f + static_cast<float>(i % 3001) / 1024.0f;
      }
      const std::vector<float> g(n, 0.0f);
      for (float thr : {0.0f, from_bits(1u)}) {
        const size_t mm = host_list_length(r0, g, thr);
        for (size_t cap : {mm, mm + 7}) {
          for (size_t k : {size_t{1}, mm / 3 + 1, mm - mm / 7, mm}) {
            if (k == 0) continue;  // an empty list
            std::vector<float> rh = r0;
            std::vector<int32_t> ih(cap + 1);
            std::vector<float> vh(cap + 1);
            pgs_fused_t want{}, got{};
            ASSERT_EQ(
                cpu()->accumulate_kth(cpu(), rh.data(), g.data(), n, thr,
                                      ih.data(), vh.data(), cap, k, &want),
                PGS_OK);
            Dev<float> r(r0), gd(g);
            Dev<int32_t> idx(cap + 1);
            Dev<float> val(cap + 1);
            ASSERT_EQ(gpu()->accumulate_kth(gpu(), r.get(), gd.get(), n, thr,
                                            idx.get(), val.get(), cap, k, &got),
                      PGS_OK);
            const std::string at =
                "n " + std::to_string(n) + " kind " + std::to_string(kind) +
                " thr " + std::to_string(bits_of(thr)) + " cap " +
                std::to_string(cap) + " k " + std::to_string(k);
            EXPECT_EQ(got.count, want.count) << at;
            EXPECT_EQ(bits_of(got.kth), bits_of(want.kth)) << at;
            EXPECT_EQ(got.n_gt, want.n_gt) << at;
          }
        }
      }
    }
  }
}

// accumulate_kth_regions against the host table, in one wait for the
// device: accumulate_kth's results and, where the k-th was found, the list's
// region runs and counts at it (every region count of the host); with more
// regions than the device takes in one pass, no counts (counted 0).
TEST_F(CudaFused, AccumulateKthRegionsMatchesHostInOneWait) {
  for (size_t n : sizes()) {
    const std::vector<float> r0 = normal(n, 23 + n);
    const std::vector<float> g = with_bad(n, 25 + n);
    const float thr = 0.5f;
    const size_t mm = host_list_length(r0, g, thr), cap = mm + 7;
    for (int nreg : {1, 3, 32, 40}) {
      std::vector<int64_t> keys(static_cast<size_t>(nreg) + 1);
      for (int j = 0; j <= nreg; ++j)
        keys[static_cast<size_t>(j)] = static_cast<int64_t>(n) * j / nreg;
      if (nreg == 3) keys[2] = keys[1];  // an empty region
      for (size_t k : {size_t{1}, mm / 3 + 1, mm, mm + 1}) {
        const size_t nk = keys.size();
        std::vector<int64_t> pw(nk, -1), gw(nk, -1), ew(nk, -1);
        std::vector<int64_t> pg(nk, -2), gg(nk, -2), eg(nk, -2);
        pgs_regions_t want_reg = {keys.data(), nreg,      pw.data(),
                                  gw.data(),   ew.data(), -1};
        pgs_regions_t got_reg = {keys.data(), nreg,      pg.data(),
                                 gg.data(),   eg.data(), -1};
        std::vector<float> rh = r0;
        std::vector<int32_t> ih(cap + 1);
        std::vector<float> vh(cap + 1);
        pgs_fused_t want{}, got{};
        ASSERT_EQ(cpu()->accumulate_kth_regions(cpu(), rh.data(), g.data(), n,
                                                thr, ih.data(), vh.data(), cap,
                                                k, &want, &want_reg),
                  PGS_OK);
        Dev<float> r(r0), gd(g);
        Dev<int32_t> idx(cap + 1);
        Dev<float> val(cap + 1);
        const uint64_t s0 = gpu()->host_syncs(gpu());
        ASSERT_EQ(gpu()->accumulate_kth_regions(gpu(), r.get(), gd.get(), n,
                                                thr, idx.get(), val.get(), cap,
                                                k, &got, &got_reg),
                  PGS_OK);
        const std::string at = "n " + std::to_string(n) + " nreg " +
                               std::to_string(nreg) + " k " + std::to_string(k);
        EXPECT_LE(gpu()->host_syncs(gpu()) - s0, 1u) << "one wait, " << at;
        EXPECT_TRUE(same(r.host(), rh)) << at;
        EXPECT_EQ(got.count, want.count) << at;
        EXPECT_EQ(bits_of(got.kth), bits_of(want.kth)) << at;
        EXPECT_EQ(got.n_gt, want.n_gt) << at;
        if (nreg >= 33 || want.kth < 0.0f) {  // more than one pass takes
          EXPECT_EQ(got_reg.counted, 0) << at;
          if (want.kth < 0.0f) {
            EXPECT_EQ(want_reg.counted, 0) << at;
          }
          continue;
        }
        ASSERT_EQ(want_reg.counted, 1) << at;
        ASSERT_EQ(got_reg.counted, 1) << at;
        EXPECT_EQ(pg, pw) << at;
        gg.resize(static_cast<size_t>(nreg));
        gw.resize(static_cast<size_t>(nreg));
        eg.resize(static_cast<size_t>(nreg));
        ew.resize(static_cast<size_t>(nreg));
        EXPECT_EQ(gg, gw) << at;
        EXPECT_EQ(eg, ew) << at;
      }
    }
  }
}

// accumulate_kth with the accumulator and the gradient at any offset from
// 16-byte alignment: the pass loads whole vectors only where both are
// aligned, one word at a time elsewhere.
TEST_F(CudaFused, AccumulateKthUnalignedMatchesHost) {
  for (size_t n : {size_t{1000}, size_t{2 * 4096 + 33}, size_t{65537}}) {
    const std::vector<float> r0 = normal(n, 17 + n);
    const std::vector<float> g = with_bad(n, 19 + n);
    for (auto [ro, go] : {std::pair<size_t, size_t>{1, 0}, {0, 3}, {2, 2}}) {
      const float thr = 1.5f;
      const size_t cap = n, k = n / 50 + 1;
      std::vector<float> rh = r0;
      std::vector<int32_t> ih(cap);
      std::vector<float> vh(cap);
      pgs_fused_t want{}, got{};
      ASSERT_EQ(cpu()->accumulate_kth(cpu(), rh.data(), g.data(), n, thr,
                                      ih.data(), vh.data(), cap, k, &want),
                PGS_OK);
      Dev<float> r(n + ro), gd(n + go);
      r.put(r0, ro);
      gd.put(g, go);
      Dev<int32_t> idx(cap);
      Dev<float> val(cap);
      ASSERT_EQ(gpu()->accumulate_kth(gpu(), r.get() + ro, gd.get() + go, n,
                                      thr, idx.get(), val.get(), cap, k, &got),
                PGS_OK);
      const std::string at = "n " + std::to_string(n) + " offsets " +
                             std::to_string(ro) + "," + std::to_string(go);
      EXPECT_TRUE(same(r.host(ro, n), rh)) << at;
      EXPECT_EQ(got.count, want.count) << at;
      EXPECT_EQ(got.nonfinite, want.nonfinite) << at;
      EXPECT_GT(got.nonfinite, 0) << at;
      EXPECT_EQ(bits_of(got.kth), bits_of(want.kth)) << at;
      EXPECT_EQ(got.n_gt, want.n_gt) << at;
      const size_t mm = static_cast<size_t>(want.count);
      ASSERT_GT(mm, k) << at;
      ih.resize(mm);
      vh.resize(mm);
      EXPECT_TRUE(same(idx.host(0, mm), ih)) << at;
      EXPECT_TRUE(same(val.host(0, mm), vh)) << at;
    }
  }
}

TEST_F(CudaFused, ShiftLocateAndSyncCount) {
  std::vector<int32_t> idx = sorted_subset(20000, 1 << 24, 41);
  const std::vector<int64_t> keys = {0, 5, 1 << 20, 1 << 23, 1 << 24};
  std::vector<int64_t> ph(keys.size()), pd(keys.size());
  Dev<int32_t> d(idx);
  ASSERT_EQ(cpu()->locate(cpu(), idx.data(), idx.size(), keys.data(),
                          static_cast<int>(keys.size()), ph.data()),
            PGS_OK);
  const uint64_t s0 = gpu()->host_syncs(gpu());
  ASSERT_EQ(gpu()->locate(gpu(), d.get(), idx.size(), keys.data(),
                          static_cast<int>(keys.size()), pd.data()),
            PGS_OK);
  EXPECT_EQ(gpu()->host_syncs(gpu()) - s0, 1u) << "one read back";
  EXPECT_EQ(pd, ph);
  ASSERT_EQ(gpu()->shift_idx(gpu(), d.get(), idx.size(), -12345), PGS_OK);
  ASSERT_EQ(cpu()->shift_idx(cpu(), idx.data(), idx.size(), -12345), PGS_OK);
  EXPECT_TRUE(same(d.host(), idx));
}

// count_pair_regions against the host table, in one read back: keys in the
// kernel's parameters (up to 33) or copied to the device, and counts that
// the locate kernel clears (more of them than it has threads at 300), one
// call after another in the same memory.
TEST_F(CudaFused, CountPairRegionsMatchesHostInOneWait) {
  for (size_t m : {size_t{0}, size_t{1}, size_t{5000}, size_t{300000}}) {
    std::vector<int32_t> idx = sorted_subset(m * 2 + 1, 1 << 24, 43 + m);
    idx.resize(std::min(idx.size(), m));
    std::vector<float> val = normal(idx.size(), 44 + m);
    for (size_t j = 0; j < val.size(); j += 11) val[j] = 0.5f;
    for (size_t j = 3; j < val.size(); j += 19) val[j] = 0.0f;
    Dev<int32_t> di(idx);
    Dev<float> dv(val);
    for (int nreg : {1, 2, 4, 8, 32, 33, 300, 2}) {
      std::vector<int64_t> keys(static_cast<size_t>(nreg) + 1);
      for (int j = 0; j <= nreg; ++j)
        keys[static_cast<size_t>(j)] = (INT64_C(1) << 24) * j / nreg;
      if (nreg == 4) keys[2] = keys[1];  // an empty region
      const size_t nk = keys.size();
      std::vector<int64_t> ph(nk), gh(nk), eh(nk), pd(nk), gd(nk), ed(nk);
      ASSERT_EQ(cpu()->count_pair_regions(cpu(), idx.data(), val.data(), m,
                                          keys.data(), nreg, 0.5f, ph.data(),
                                          gh.data(), eh.data()),
                PGS_OK);
      const uint64_t s0 = gpu()->host_syncs(gpu());
      ASSERT_EQ(gpu()->count_pair_regions(gpu(), di.get(), dv.get(), m,
                                          keys.data(), nreg, 0.5f, pd.data(),
                                          gd.data(), ed.data()),
                PGS_OK);
      EXPECT_EQ(gpu()->host_syncs(gpu()) - s0, 1u) << "one read back";
      EXPECT_EQ(pd, ph) << "m " << m << " nreg " << nreg;
      EXPECT_EQ(std::vector<int64_t>(gd.begin(), gd.begin() + nreg),
                std::vector<int64_t>(gh.begin(), gh.begin() + nreg));
      EXPECT_EQ(std::vector<int64_t>(ed.begin(), ed.begin() + nreg),
                std::vector<int64_t>(eh.begin(), eh.begin() + nreg));
    }
  }
}

}  // namespace
}  // namespace cuda_test
