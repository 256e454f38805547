// rules::route_from_logits checked against the serial repeated-argmax selection it replaced (ties
// to the lowest index), at one lane and at 2..8 lanes run as threads with a barrier for sync():
// the same ids and weight bits at any lane count. Built and run by tests/test_rules_selftest.py.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "common/engine_rules.h"

namespace {

void serial_top_k(const float* sel_in, int E, int K, int32_t* ids) {
    std::vector<float> sel(sel_in, sel_in + E);
    for (int k = 0; k < K; ++k) {
        int best = -1;
        for (int e = 0; e < E; ++e) {
            if (sel[e] == -INFINITY) continue;
            if (best < 0 || sel[e] > sel[best]) best = e;
        }
        ids[k] = best;
        sel[size_t(best)] = -INFINITY;
    }
}

struct BarrierSync {
    std::barrier<>* bar;
    void operator()() const { bar->arrive_and_wait(); }
};

}  // namespace

int main() {
    std::mt19937 rng(7);
    long failures = 0, cases = 0;
    for (int it = 0; it < 20000; ++it) {
        const int E = 1 + int(rng() % 31), K = 1 + int(rng() % unsigned(E));
        const int lanes = it % 10 == 0 ? 2 + int(rng() % 7) : 1;
        const bool ties = rng() % 2 == 0;  // small integer logits: many equal scores
        std::vector<float> logits(E), bias(E), sel(E), scratch(2 * E), wts_a(K), wts_b(K);
        std::vector<int32_t> ids_a(K), ids_b(K), ref(K);
        for (int e = 0; e < E; ++e) {
            logits[e] = ties ? float(int(rng() % 5)) - 2.0f : std::uniform_real_distribution<float>(-6.0f, 6.0f)(rng);
            bias[e] = ties ? float(int(rng() % 3)) * 0.25f : std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
            sel[e] = dq::rules::sqrt_softplus(logits[e]) + bias[e];
        }
        serial_top_k(sel.data(), E, K, ref.data());
        dq::rules::route_from_logits(logits.data(), bias.data(), nullptr, 0, E, K, 1.5f, ids_a.data(), wts_a.data(),
                                     scratch.data());
        std::barrier<> bar(lanes);
        std::vector<float> scratch_b(2 * E);
        std::vector<std::thread> threads;
        for (int l = 0; l < lanes; ++l)
            threads.emplace_back([&, l] {
                dq::rules::route_from_logits(logits.data(), bias.data(), nullptr, 0, E, K, 1.5f, ids_b.data(),
                                             wts_b.data(), scratch_b.data(), l, lanes, BarrierSync{&bar});
            });
        for (auto& t : threads) t.join();
        ++cases;
        for (int k = 0; k < K; ++k)
            if (ids_a[k] != ref[k] || ids_b[k] != ref[k] || wts_a[k] != wts_b[k]) {
                if (failures < 5)
                    std::printf("E %d K %d lanes %d slot %d: serial %d, one lane %d, lanes %d\n", E, K, lanes, k,
                                ref[k], ids_a[k], ids_b[k]);
                ++failures;
                break;
            }
    }
    std::printf("route_from_logits: %ld of %ld cases differ\n", failures, cases);
    return failures == 0 ? 0 : 1;
}
