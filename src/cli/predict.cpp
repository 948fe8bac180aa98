// cli/predict: `tessera predict` — the performance model's step of a hybrid data-parallel job (sched/perf_model,
// docs/model.md): the split, compute, every collective's phases and the link that bounds each, overlap, the
// optimizer; each island's path per collective (its library or the host engine, as built or a what-if);
// tokens/s, hybrid against the sum of its parts, cost per million tokens, domestic share, the binding term, and
// with --versus the same job on one card type alone. Exit status: 0, or 2 on bad input.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "sched/perf_model.hpp"

namespace {

using namespace tessera::sched;
using tessera::Result;
using tessera::Status;

int Fail(const Status& s) {
  std::fprintf(stderr, "tessera predict: %s\n", s.message().c_str());
  return tessera::cli::ExitCodeOf(s);
}

// TYPE=VALUE pairs of a repeated option, by type.
Result<std::map<std::string, double>> PerType(const std::string& flag, const std::vector<std::string>& items) {
  std::map<std::string, double> out;
  for (const auto& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return tessera::InvalidArgument(fmt::format("{}: '{}' is not TYPE=VALUE", flag, item));
    TSR_ASSIGN_OR_RETURN(double v, perf::ParseQuantity(flag + " " + item.substr(0, eq), item.substr(eq + 1)));
    out[item.substr(0, eq)] = v;
  }
  return out;
}

// --island TYPE=CARDS or TYPE=CARDS@PER_NODE.
Result<perf::IslandSpec> IslandOf(const std::string& item) {
  perf::IslandSpec is;
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    return tessera::InvalidArgument(fmt::format("--island: '{}' is not TYPE=CARDS[@CARDS_PER_NODE]", item));
  is.type = item.substr(0, eq);
  std::string cards = item.substr(eq + 1), per_node;
  if (const size_t at = cards.find('@'); at != std::string::npos) {
    per_node = cards.substr(at + 1);
    cards = cards.substr(0, at);
  }
  auto whole = [&](const std::string& text, const char* what) -> Result<int64_t> {
    TSR_ASSIGN_OR_RETURN(double v, perf::ParseQuantity(fmt::format("--island {}: {}", is.type, what), text));
    if (v < 1 || v != std::floor(v))
      return tessera::InvalidArgument(
          fmt::format("--island {}: {} '{}' is not a positive integer", is.type, what, text));
    return static_cast<int64_t>(v);
  };
  TSR_ASSIGN_OR_RETURN(is.cards, whole(cards, "cards"));
  if (!per_node.empty()) {
    TSR_ASSIGN_OR_RETURN(is.cards_per_node, whole(per_node, "cards per node"));
  }
  return is;
}

int Bytes(const std::string& flag, const std::string& dtype, int* out) {
  if (dtype == "bf16" || dtype == "f16" || dtype == "bfloat16" || dtype == "float16") {
    *out = 2;
  } else if (dtype == "f32" || dtype == "float32") {
    *out = 4;
  } else {
    std::fprintf(stderr, "tessera predict: %s: '%s' is not bf16, f16 or f32\n", flag.c_str(), dtype.c_str());
    return tessera::cli::kExitUsage;
  }
  return 0;
}

std::string Seconds(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

nlohmann::json Json(const perf::Scenario& s, const perf::Prediction& p, const std::string& currency) {
  nlohmann::json j;
  auto& isl = j["islands"] = nlohmann::json::array();
  for (size_t i = 0; i < s.islands.size(); ++i)
    isl.push_back({{"type", s.islands[i].type},
                   {"cards", s.islands[i].cards},
                   {"domestic", s.islands[i].domestic},
                   {"samples_per_micro_batch", p.split[i]},
                   {"tokens_per_s", p.island_tokens_per_s[i]}});
  j["compute_s"] = p.compute_s;
  j["comm_s"] = p.comm_s;
  j["hidden_s"] = p.hidden_s;
  j["exposed_comm_s"] = p.exposed_comm_s;
  j["optimizer_s"] = p.optimizer_s;
  j["step_s"] = p.step_s;
  j["tokens_per_step"] = p.tokens_per_step;
  j["tokens_per_s"] = p.tokens_per_s;
  j["sum_of_parts_tokens_per_s"] = p.sum_of_parts_tokens_per_s;
  j["hybrid_over_parts"] = p.hybrid_over_parts;
  j["currency"] = currency;
  j["cost_per_hour"] = FormatMoney(p.cost_per_hour, 2);
  j["cost_per_million_tokens"] = p.cost_per_million_tokens;
  j["domestic_card_share"] = p.domestic_card_share;
  j["domestic_compute_share"] = p.domestic_compute_share;
  j["binding"] = p.binding;
  j["binding_detail"] = p.binding_detail;
  j["island_path"] = perf::IslandPathName(s.island_path);
  j["island_reduce"] = perf::IslandReduceName(s.island_reduce);
  j["nics_per_node"] = s.links.nics_per_node;
  auto& cs = j["collectives"] = nlohmann::json::array();
  for (const auto& c : p.collectives) {
    nlohmann::json cj{{"name", c.name},   {"kind", perf::CollName(c.kind)}, {"bytes", c.bytes},
                      {"calls", c.calls}, {"seconds", c.seconds},           {"staging_s", c.staging_s}};
    auto& ph = cj["phases"] = nlohmann::json::array();
    for (const auto& x : c.phases) ph.push_back({{"name", x.name}, {"seconds", x.seconds}, {"bound", x.bound}});
    auto& ip = cj["islands"] = nlohmann::json::array();
    for (const auto& x : c.islands)
      ip.push_back({{"path", x.path},
                    {"widened", x.widened},
                    {"native", x.native},
                    {"staged_bytes", x.staged_bytes},
                    {"ring_bytes", x.ring_bytes},
                    {"why", x.why}});
    cs.push_back(std::move(cj));
  }
  return j;
}

void Print(const perf::Scenario& s, const perf::Prediction& p, const std::string& currency) {
  std::string mix;
  for (const auto& is : s.islands) mix += fmt::format("{}{} {}", mix.empty() ? "" : " + ", is.cards, is.type);
  std::printf(
      "predicted step: %s, %.4g parameters, ZeRO-%d%s, %lld tokens a step, island phases %s, island reduce %s, %lld "
      "NIC%s a node\n\n",
      mix.c_str(), s.model.params, s.model.zero, s.model.offload ? " with offload" : "",
      static_cast<long long>(p.tokens_per_step), perf::IslandPathName(s.island_path),
      perf::IslandReduceName(s.island_reduce), static_cast<long long>(s.links.nics_per_node),
      s.links.nics_per_node == 1 ? "" : "s");
  std::printf("  split per micro-batch of %lld sequences:", static_cast<long long>(s.model.batch));
  for (size_t i = 0; i < s.islands.size(); ++i)
    std::printf("%s %s %lld", i ? "," : "", s.islands[i].type.c_str(), static_cast<long long>(p.split[i]));
  std::printf("\n  compute:        %s (slowest rank: island %s)\n", Seconds(p.compute_s).c_str(),
              s.islands[p.slowest_island].type.c_str());
  std::printf("  communication:  %s, of it %s hidden behind compute, %s exposed\n", Seconds(p.comm_s).c_str(),
              Seconds(p.hidden_s).c_str(), Seconds(p.exposed_comm_s).c_str());
  for (const auto& c : p.collectives) {
    std::printf("    %s x%lld: %s a call (%.4g bytes)", c.name.c_str(), static_cast<long long>(c.calls),
                Seconds(c.seconds).c_str(), c.bytes);
    if (c.staging_s > 0) std::printf(", staging %s", Seconds(c.staging_s).c_str());
    std::printf("\n");
    for (const auto& x : c.phases)
      std::printf("      %-40s %12s  %s\n", x.name.c_str(), Seconds(x.seconds).c_str(), x.bound.c_str());
    for (size_t i = 0; i < c.islands.size() && s.islands.size() > 1; ++i) {
      const auto& x = c.islands[i];
      std::printf("      island %zu (%s): %s%s", i, s.islands[i].type.c_str(), x.path.c_str(),
                  x.widened  ? ", widened to f32 on the device"
                  : x.native ? ", 16-bit reduced in its own type"
                             : "");
      if (x.staged_bytes > 0) std::printf(", stages %.4g bytes a rank", x.staged_bytes);
      if (!x.why.empty()) std::printf(" (%s)", x.why.c_str());
      std::printf("\n");
    }
  }
  std::printf("  optimizer:      %s\n", Seconds(p.optimizer_s).c_str());
  std::printf("  step:           %s\n", Seconds(p.step_s).c_str());
  std::printf("  tokens/s:       %.0f (", p.tokens_per_s);
  for (size_t i = 0; i < s.islands.size(); ++i)
    std::printf("%s%s %.0f", i ? ", " : "", s.islands[i].type.c_str(), p.island_tokens_per_s[i]);
  std::printf(")\n  sum of parts:   %.0f tokens/s (each island a job of its own): hybrid / parts %.1f%%\n",
              p.sum_of_parts_tokens_per_s, 100 * p.hybrid_over_parts);
  if (p.cost_per_hour > 0)
    std::printf("  cost:           %s %s/h, %.4f %s per million tokens\n", FormatMoney(p.cost_per_hour).c_str(),
                currency.c_str(), p.cost_per_million_tokens, currency.c_str());
  std::printf("  domestic share: %.1f%% of the cards, %.1f%% of the compute\n", 100 * p.domestic_card_share,
              100 * p.domestic_compute_share);
  std::printf("  binding term:   %s: %s\n", p.binding.c_str(), p.binding_detail.c_str());
}

// Presets: documented configurations whose flags apply where the command line does not give them.
// reference-128: docs/model.md's seed — 64 + 64 cards on 8-card hosts, 130B, ZeRO-3 with offload, RoCE 200 Gb/s.
const std::map<std::string, std::vector<std::string>>& Presets() {
  static const std::map<std::string, std::vector<std::string>> presets = {
      {"reference-128",
       {"--island",
        "ascend-910b=64@8",
        "--island",
        "nvidia-h800=64@8",
        "--tflops",
        "ascend-910b=320",
        "--tflops",
        "nvidia-h800=989",
        "--mfu",
        "ascend-910b=0.4",
        "--mfu",
        "nvidia-h800=0.4",
        "--fabric-gbs",
        "ascend-910b=196",
        "--fabric-gbs",
        "nvidia-h800=200",
        "--params",
        "130B",
        "--zero",
        "3",
        "--offload",
        "--host-adam-gbs",
        "200",
        "--seq",
        "2048",
        "--batch",
        "512",
        "--accum",
        "8",
        "--overlap",
        "1",
        "--net-gbps",
        "200",
        "--shm-gbs",
        "2",
        "--pcie-gbs",
        "25",
        "--latency-us",
        "20"}},
  };
  return presets;
}

// One input of the model that may be missing: the flag that gives it, for which type, and where it lives.
struct Input {
  std::string flag;  // "--shm-gbs GB/s", "--tflops nvidia-h800=TFLOPS"
  std::function<double&(perf::Scenario&)> at;
};

// Every input that the model needs for this scenario and that is not given, found by asking the model: with
// every unset input set the prediction must work, and without one of them it must fail for it to be needed.
Result<std::vector<std::string>> MissingInputs(const perf::Scenario& s, const std::vector<Input>& inputs) {
  perf::Scenario filled = s;
  std::vector<const Input*> unset;
  for (const auto& in : inputs)
    if (in.at(filled) == 0) {
      unset.push_back(&in);
      in.at(filled) = 1;
    }
  if (unset.empty()) return std::vector<std::string>{};
  auto all = perf::Predict(filled);
  if (!all.ok()) return all.status();
  std::vector<std::string> missing;
  for (const Input* in : unset) {
    perf::Scenario without = filled;
    in->at(without) = 0;
    if (!perf::Predict(without).ok()) missing.push_back(in->flag);
  }
  return missing;
}

int RunPredict(int argc, char** argv) {
  CLI::App app{"Predict one training step of a hybrid data-parallel job (docs/model.md)", "tessera predict"};
  std::vector<std::string> islands, rates, weights, tflops, mfus, fabrics, hbms, hosts, families;
  std::string catalog_path, params_text, grad_dtype = "bf16", param_dtype = "bf16", versus;
  int zero = 0;
  bool offload = false, json = false, one_host = false, no_device_bridge = false, island_ccl = false,
       island_host = false, island_host_reduce = false;
  int64_t seq = 0, batch = 0, accum = 1, cores = 0, nics = 1;
  std::string island_reduce = "f32";
  double overlap = 0, shm_gbs = 0, net_gbps = 0, device_gbs = 0, pcie_gbs = 0, latency_us = 0, host_adam_gbs = 0;
  std::string preset;
  std::string preset_names;
  for (const auto& [name, args] : Presets()) preset_names += (preset_names.empty() ? "" : ", ") + name;
  app.add_option("--preset", preset,
                 "a documented configuration whose flags apply where the command line gives none: " + preset_names +
                     " (docs/model.md)")
      ->check(CLI::IsMember(Presets()));
  app.add_option("--island", islands, "TYPE=CARDS[@CARDS_PER_NODE] (default 8 per node), in rank order (required)");
  app.add_option("--catalog", catalog_path, "catalog (YAML): prices and domesticity of the types");
  app.add_option("--rate", rates, "TYPE=TOKENS_PER_S per card, measured (else --tflops and --mfu)");
  app.add_option("--split-weight", weights, "TYPE=W: the speed the sampler splits by (default: the cards' rate)");
  app.add_option("--tflops", tflops, "TYPE=TFLOPS: dense 16-bit peak per card");
  app.add_option("--mfu", mfus, "TYPE=FRACTION: model FLOP utilisation of that type's cards");
  app.add_option("--fabric-gbs", fabrics, "TYPE=GB/s: island fabric per card (NVLink, HCCS), for the vendor ring");
  app.add_option("--hbm-gbs", hbms, "TYPE=GB/s: card memory bandwidth (the optimizer on the card)");
  app.add_option("--host-ranks", hosts, "TYPE: that island's ranks are host (CPU) ranks");
  app.add_option(
      "--family", families,
      "TYPE=FAMILY: the device family of that type's cards (cuda, npu, musa, corex; default: from the catalog's "
      "vendor, nvidia -> cuda, ascend -> npu): its capabilities (device bridge, collective library)");
  app.add_option("--params", params_text, "parameters (151943168, 1.3e11, 130B) (required)");
  app.add_option("--grad-dtype", grad_dtype, "gradient type: bf16, f16 or f32 (default bf16)");
  app.add_option("--param-dtype", param_dtype, "parameter type on the cards, for ZeRO's allgathers (default bf16)");
  app.add_option("--zero", zero, "ZeRO stage 0-3 (default 0: plain data parallel)");
  app.add_flag("--offload", offload, "optimizer on the host (ZeRO-Offload)");
  app.add_option("--host-adam-gbs", host_adam_gbs, "offload: host memory bandwidth per node for the optimizer, GB/s");
  app.add_option("--seq", seq, "tokens per sequence (required)");
  app.add_option("--batch", batch,
                 "sequences per micro-batch, the whole job (what the speed split divides) (required)");
  app.add_option("--accum", accum, "micro-batches per step (default 1)");
  app.add_option("--overlap", overlap, "part of the communication hidden behind compute, 0-1 (default 0)");
  app.add_option("--shm-gbs", shm_gbs, "shared-memory transfers per host, GB/s");
  app.add_option("--net-gbps", net_gbps, "network per NIC between hosts, Gb/s (RoCE 200 Gb/s: 200)");
  app.add_option("--nics-per-node", nics,
                 "NICs of --net-gbps each per node, rail-aligned: local rank i on NIC i % N, so a node's ranks reach "
                 "min(N, ranks on it) x --net-gbps (default 1)");
  app.add_option("--device-gbs", device_gbs, "device bridge per card, GB/s");
  app.add_option("--pcie-gbs", pcie_gbs, "pinned host<->device copies per card, GB/s");
  app.add_option("--latency-us", latency_us, "per message on shm and network, microseconds");
  app.add_option("--cores-per-host", cores, "host ranks beyond this many per host share the cores (default: no limit)");
  app.add_flag("--one-host", one_host, "every rank on one host");
  app.add_flag("--no-device-bridge", no_device_bridge, "stage one-card device islands through host memory");
  auto* ccl_flag = app.add_flag("--island-ccl", island_ccl,
                                "every multi-card device island of a hybrid world on its library, 16-bit reductions "
                                "widened on the device: the default (as built), kept for older command lines");
  auto* host_reduce_flag =
      app.add_flag("--island-host-reduce", island_host_reduce,
                   "what-if: the 16-bit reductions of multi-card islands without the device bridge (npu, musa) "
                   "staged whole on the host engine (no widening on the device, or no operator library)")
          ->excludes(ccl_flag);
  app.add_flag("--island-host-path", island_host,
               "what-if: every island of a hybrid world stages the whole buffer and runs its island phases on the "
               "host engine (the code before 4d8e064)")
      ->excludes(ccl_flag)
      ->excludes(host_reduce_flag);
  app.add_option("--island-reduce", island_reduce,
                 "f32 (default) or native: how an island's library reduces 16-bit data (TESSERA_ISLAND_REDUCE): "
                 "widened to f32 on the device, or in its own type (the island ring's bytes halve)")
      ->check(CLI::IsMember({"f32", "native"}));
  app.add_option("--versus", versus, "TYPE: also predict the same job on as many cards of TYPE alone");
  app.add_flag("--json", json, "print JSON");
  try {
    app.parse(argc, argv);
    if (!preset.empty()) {
      // Again, with the preset's flags first where the command line gives none of that flag.
      std::vector<std::string> args = {argv[0]};
      const auto& p = Presets().at(preset);
      for (size_t i = 0; i < p.size(); ++i) {
        bool valued = i + 1 < p.size() && p[i + 1].rfind("--", 0) != 0;
        if (app.get_option(p[i])->count() == 0) {
          args.push_back(p[i]);
          if (valued) args.push_back(p[i + 1]);
        }
        if (valued) ++i;
      }
      for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
      std::vector<char*> av;
      for (auto& a : args) av.push_back(a.data());
      app.clear();
      app.parse(static_cast<int>(av.size()), av.data());
    }
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  {
    std::vector<std::string> missing;
    if (islands.empty()) missing.push_back("--island TYPE=CARDS[@CARDS_PER_NODE] (e.g. --island nvidia-h800=8)");
    if (params_text.empty()) missing.push_back("--params N (e.g. 7B)");
    if (seq <= 0) missing.push_back("--seq TOKENS (e.g. 2048)");
    if (batch <= 0) missing.push_back("--batch SEQUENCES (e.g. 32)");
    if (!missing.empty()) {
      std::string list;
      for (const auto& m : missing) list += "\n  " + m;
      std::fprintf(stderr, "tessera predict: missing inputs:%s\n(or start from --preset %s: docs/model.md)\n",
                   list.c_str(), preset_names.c_str());
      return tessera::cli::kExitUsage;
    }
  }
  perf::Scenario s;
  for (const auto& item : islands) {
    auto is = IslandOf(item);
    if (!is.ok()) return Fail(is.status());
    s.islands.push_back(*is);
  }
  struct {
    const char* flag;
    std::vector<std::string>* items;
    double perf::IslandSpec::*field;
  } per_type[] = {{"--rate", &rates, &perf::IslandSpec::tokens_per_s},
                  {"--split-weight", &weights, &perf::IslandSpec::split_weight},
                  {"--tflops", &tflops, &perf::IslandSpec::tflops},
                  {"--mfu", &mfus, &perf::IslandSpec::mfu},
                  {"--fabric-gbs", &fabrics, &perf::IslandSpec::fabric_gbs},
                  {"--hbm-gbs", &hbms, &perf::IslandSpec::hbm_gbs}};
  for (const auto& pt : per_type) {
    auto values = PerType(pt.flag, *pt.items);
    if (!values.ok()) return Fail(values.status());
    for (const auto& [type, v] : *values) {
      bool found = false;
      for (auto& is : s.islands)
        if (is.type == type) {
          is.*pt.field = v;
          found = true;
        }
      if (!found && type != versus)
        return Fail(
            tessera::InvalidArgument(fmt::format("{}: type '{}' is not one of the --island types", pt.flag, type)));
    }
  }
  for (const auto& item : families) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return Fail(tessera::InvalidArgument(fmt::format("--family: '{}' is not TYPE=FAMILY", item)));
    bool found = false;
    for (auto& is : s.islands)
      if (is.type == item.substr(0, eq)) {
        is.family = item.substr(eq + 1);
        found = true;
      }
    if (!found && item.substr(0, eq) != versus)
      return Fail(tessera::InvalidArgument(
          fmt::format("--family: type '{}' is not one of the --island types", item.substr(0, eq))));
  }
  for (const auto& h : hosts) {
    bool found = false;
    for (auto& is : s.islands)
      if (is.type == h) {
        is.device = false;
        found = true;
      }
    if (!found)
      return Fail(tessera::InvalidArgument(fmt::format("--host-ranks: type '{}' is not one of the --island types", h)));
  }
  auto params = perf::ParseQuantity("--params", params_text);
  if (!params.ok()) return Fail(params.status());
  s.model.params = *params;
  if (int rc = Bytes("--grad-dtype", grad_dtype, &s.model.grad_bytes)) return rc;
  if (int rc = Bytes("--param-dtype", param_dtype, &s.model.param_bytes)) return rc;
  s.model.zero = zero;
  s.model.offload = offload;
  s.model.host_adam_gbs = host_adam_gbs;
  s.model.seq = seq;
  s.model.batch = batch;
  s.model.accum = accum;
  s.model.overlap = overlap;
  if (nics < 1) return Fail(tessera::InvalidArgument(fmt::format("--nics-per-node: {} is not a positive count", nics)));
  s.links = {shm_gbs, net_gbps / 8, device_gbs, pcie_gbs, latency_us * 1e-6, cores, nics};
  s.one_host = one_host;
  s.device_bridge = !no_device_bridge;
  s.island_path = island_host          ? perf::IslandPath::kHost
                  : island_host_reduce ? perf::IslandPath::kHostReduce
                                       : perf::IslandPath::kAsBuilt;
  s.island_reduce = island_reduce == "native" ? perf::IslandReduce::kNative : perf::IslandReduce::kF32;
  std::string currency = "CNY";
  Catalog catalog;
  if (!catalog_path.empty()) {
    auto c = LoadCatalog(catalog_path);
    if (!c.ok()) return Fail(c.status());
    catalog = std::move(*c);
    currency = catalog.currency;
    if (auto st = perf::FillFromCatalog(catalog, &s); !st.ok()) return Fail(tessera::InvalidArgument(st.message()));
    // The catalog's model figures (docs/sched.md, "Placing by the model") fill what the flags leave unset.
    for (auto& is : s.islands) {
      const AcceleratorType* t = catalog.Find(is.type);
      if (t == nullptr || !t->model) continue;
      for (auto [field, v] :
           {std::pair{&perf::IslandSpec::tflops, t->model->tflops}, std::pair{&perf::IslandSpec::mfu, t->model->mfu},
            std::pair{&perf::IslandSpec::fabric_gbs, t->model->fabric_gbs},
            std::pair{&perf::IslandSpec::hbm_gbs, t->model->hbm_gbs}})
        if (is.*field == 0) is.*field = v;
    }
    if (catalog.model) {
      const HostFigures& h = *catalog.model;
      for (auto [field, v] :
           {std::pair{&s.links.net_gbs, h.net_gbps / 8}, std::pair{&s.links.pcie_gbs, h.pcie_gbs},
            std::pair{&s.links.shm_gbs, h.shm_gbs}, std::pair{&s.links.latency_s, h.latency_us * 1e-6},
            std::pair{&s.model.host_adam_gbs, h.host_adam_gbs}})
        if (*field == 0) *field = v;
    }
  }
  {
    // Every input the model still lacks, at once, each with the flag that gives it.
    std::vector<Input> inputs;
    for (size_t i = 0; i < s.islands.size(); ++i) {
      const std::string& t = s.islands[i].type;
      if (s.islands[i].tokens_per_s == 0) {
        inputs.push_back(
            {fmt::format("--tflops {}=TFLOPS (dense 16-bit peak per card; or --rate {}=TOKENS_PER_S)", t, t),
             [i](perf::Scenario& x) -> double& { return x.islands[i].tflops; }});
        inputs.push_back({fmt::format("--mfu {}=FRACTION (e.g. 0.4)", t),
                          [i](perf::Scenario& x) -> double& { return x.islands[i].mfu; }});
      }
      inputs.push_back({fmt::format("--fabric-gbs {}=GB/s (NVLink, HCCS per card)", t),
                        [i](perf::Scenario& x) -> double& { return x.islands[i].fabric_gbs; }});
      inputs.push_back({fmt::format("--hbm-gbs {}=GB/s (card memory, for the optimizer on the card)", t),
                        [i](perf::Scenario& x) -> double& { return x.islands[i].hbm_gbs; }});
    }
    inputs.push_back({"--shm-gbs GB/s (shared memory per host rank; measured here: docs/model.md)",
                      [](perf::Scenario& x) -> double& { return x.links.shm_gbs; }});
    inputs.push_back(
        {"--net-gbps Gb/s (network per host, e.g. 200)", [](perf::Scenario& x) -> double& { return x.links.net_gbs; }});
    inputs.push_back({"--device-gbs GB/s (device bridge per card)",
                      [](perf::Scenario& x) -> double& { return x.links.device_gbs; }});
    inputs.push_back({"--pcie-gbs GB/s (pinned host<->device copies per card, e.g. 25)",
                      [](perf::Scenario& x) -> double& { return x.links.pcie_gbs; }});
    inputs.push_back({"--host-adam-gbs GB/s (host memory per node for the offloaded optimizer)",
                      [](perf::Scenario& x) -> double& { return x.model.host_adam_gbs; }});
    auto missing = MissingInputs(s, inputs);
    if (!missing.ok()) return Fail(missing.status());
    if (!missing->empty()) {
      std::string list;
      for (const auto& m : *missing) list += "\n  " + m;
      std::fprintf(stderr,
                   "tessera predict: the model needs %zu more input(s) for this job:%s\n(or take them from a --catalog "
                   "whose types have model: figures, or from --preset %s: docs/model.md)\n",
                   missing->size(), list.c_str(), preset_names.c_str());
      return tessera::cli::kExitUsage;
    }
  }
  auto p = perf::Predict(s);
  if (!p.ok()) return Fail(p.status());

  // The same job on one type alone: as many cards, packed as that type's island is.
  std::optional<perf::Prediction> ref;
  perf::Scenario alone = s;
  if (!versus.empty()) {
    const perf::IslandSpec* like = nullptr;
    int64_t cards = 0;
    for (const auto& is : s.islands) {
      cards += is.cards;
      if (is.type == versus) like = &is;
    }
    if (like == nullptr)
      return Fail(
          tessera::InvalidArgument(fmt::format("--versus: type '{}' is not one of the --island types", versus)));
    perf::IslandSpec one = *like;
    one.cards = cards;
    alone.islands = {one};
    auto r = perf::Predict(alone);
    if (!r.ok()) return Fail(r.status());
    ref = *r;
  }
  if (json) {
    nlohmann::json j = Json(s, *p, currency);
    if (ref) {
      j["versus"] = Json(alone, *ref, currency);
      j["versus_tokens_ratio"] = p->tokens_per_s / ref->tokens_per_s;
      if (ref->cost_per_million_tokens > 0)
        j["versus_cost_per_million_ratio"] = p->cost_per_million_tokens / ref->cost_per_million_tokens;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  Print(s, *p, currency);
  if (ref) {
    std::printf("\n  versus %lld %s alone: %.0f tokens/s (hybrid %+.1f%%), binding %s",
                static_cast<long long>(alone.islands[0].cards), versus.c_str(), ref->tokens_per_s,
                100 * (p->tokens_per_s / ref->tokens_per_s - 1), ref->binding.c_str());
    if (ref->cost_per_hour > 0)
      std::printf("; %s %s/h (hybrid %+.1f%%), %.4f per million tokens (hybrid %+.1f%%)",
                  FormatMoney(ref->cost_per_hour).c_str(), currency.c_str(),
                  100 * (static_cast<double>(p->cost_per_hour) / static_cast<double>(ref->cost_per_hour) - 1),
                  ref->cost_per_million_tokens, 100 * (p->cost_per_million_tokens / ref->cost_per_million_tokens - 1));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

TESSERA_COMMAND(predict, "Predict a hybrid job's step: split, compute, collectives per link, binding term", RunPredict);
