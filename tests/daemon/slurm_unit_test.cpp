// tests/daemon/slurm_unit_test: the Slurm executor's pure parts on text captured from Slurm 22.05 (Debian 12,
// the cluster of scripts/slurm-test-cluster.sh): `scontrol show nodes` and the fleet file it makes, the records
// of a heterogeneous job from `scontrol show job` and `sacct -c`, the state mapping, the sbatch command line and
// batch script, the bounded command runner, the daemon refusing --executor slurm without sbatch, and the Slurm
// executor refusing cards emulated on an SM share of a GPU (a single-host emulation).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "daemon/harness.hpp"
#include "daemon/jobspec.hpp"
#include "daemon/slurm.hpp"
#include "sched/sched.hpp"

namespace tessera::daemon::slurm {
namespace {

// `scontrol show nodes` on the test cluster (two nodes), verbatim.
const char* kNodes = R"(NodeName=localhost Arch=x86_64 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.70
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=npu:2
   NodeAddr=127.0.0.1 NodeHostName=vm Port=17002 Version=22.05.8
   OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0 
   RealMemory=1 AllocMem=0 FreeMem=12897 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=main 
   BootTime=2026-12-01T07:47:18 SlurmdStartTime=2026-12-01T10:25:27
   CfgTRES=cpu=2,mem=1M,billing=2

NodeName=vm Arch=x86_64 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.70
   Gres=gpu:2
   NodeAddr=127.0.0.1 NodeHostName=vm Port=17001 Version=22.05.8
   OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0 
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=main 
)";

sched::Catalog TestCatalog(const std::string& extra = "") {
  auto c = sched::ParseCatalog(R"(price_version: t
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {mlp-train: 0.5}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {mlp-train: 1.0}}
)" + extra,
                               "catalog.yaml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

TEST(SlurmParse, NodesOfScontrol) {
  auto nodes = ParseNodes(kNodes);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "localhost");
  EXPECT_EQ((*nodes)[0].state, "IDLE");
  ASSERT_EQ((*nodes)[0].partitions, std::vector<std::string>{"main"});
  ASSERT_EQ((*nodes)[0].gres.size(), 1u);
  EXPECT_EQ((*nodes)[0].gres[0].name, "npu");
  EXPECT_EQ((*nodes)[0].gres[0].count, 2);
  EXPECT_EQ((*nodes)[1].name, "vm");
  EXPECT_EQ((*nodes)[1].gres[0].name, "gpu");
}

// After a NODE_FAIL the daemon leaves the allocation's nodes that Slurm shows down out of planning: by the Slurm
// node's name, for fleet ids with a type suffix too, and only those down.
TEST(SlurmParse, LostNodesOfANodeFailAreTheDownOnes) {
  std::string text = kNodes;
  auto at = text.find("State=IDLE");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 10, "State=DOWN+NOT_RESPONDING");  // localhost went down; vm is still IDLE
  auto nodes = ParseNodes(text);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_TRUE(IsDown((*nodes)[0]));
  EXPECT_FALSE(IsDown((*nodes)[1]));
  EXPECT_EQ(LostNodes(*nodes, {"vm", "localhost/ascend-910b", "elsewhere"}),
            std::vector<std::string>{"localhost/ascend-910b"});
  EXPECT_TRUE(LostNodes(*ParseNodes(kNodes), {"vm", "localhost"}).empty());
}

TEST(SlurmParse, GresForms) {
  auto g = ParseGres("gpu:h800:8(S:0-1),npu:910b:4,gpu:1,mps:4K");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->size(), 4u);
  EXPECT_EQ((*g)[0].name, "gpu");
  EXPECT_EQ((*g)[0].type, "h800");
  EXPECT_EQ((*g)[0].count, 8);
  EXPECT_EQ((*g)[1].type, "910b");
  EXPECT_EQ((*g)[1].count, 4);
  EXPECT_EQ((*g)[2].type, "");
  EXPECT_EQ((*g)[3].count, 4096);
  EXPECT_TRUE(ParseGres("(null)")->empty());
  EXPECT_FALSE(ParseGres(":2").ok());
}

TEST(SlurmGres, OfATypeFromItsFieldElseItsVendorsFamilyElseTheVendor) {
  sched::AcceleratorType t;
  t.vendor = "nvidia";
  EXPECT_EQ(GresOf(t), "gpu");
  t.vendor = "huawei";  // a second vendor name of the npu family
  EXPECT_EQ(GresOf(t), "npu");
  t.vendor = "iluvatar";  // a family without a published GRES name
  EXPECT_EQ(GresOf(t), "iluvatar");
  t.slurm_gres = "mlu";
  EXPECT_EQ(GresOf(t), "mlu");
}

TEST(SlurmImport, FleetFileFromNodesLoadsAsTheDaemonsFleet) {
  auto nodes = ParseNodes(kNodes);
  ASSERT_TRUE(nodes.ok());
  ImportOptions o;
  o.emulated = true;
  auto y = FleetYaml(*nodes, TestCatalog(), o, "scontrol show nodes");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  auto fleet = ParseFleetSpec(*y, "imported.yaml");  // what `tessera fleet register` accepts
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString() << "\n" << *y;
  ASSERT_EQ(fleet->fleet.nodes.size(), 2u);
  EXPECT_TRUE(fleet->IsEmulated("vm"));
  std::string yaml = *y;
  EXPECT_NE(yaml.find("emulated: true"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("{id: localhost, zone: main, type: ascend-910b, cards: 2}"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("{id: vm, zone: main, type: nvidia-h800, cards: 2}"), std::string::npos) << yaml;
}

TEST(SlurmImport, SeveralTypesOnANodeTypedGresAndDownNodes) {
  // A node with two vendors' cards, typed GRES claimed through slurm_gres, a GRES nobody claims, a DOWN node.
  const char* text =
      "NodeName=a01 State=MIXED Gres=gpu:h800:8(S:0-1),npu:4,fpga:2 Partitions=gpu,all\n"
      "NodeName=a02 State=DOWN+NOT_RESPONDING Gres=gpu:h800:8 Partitions=gpu Reason=cable [root@2026-12-01]\n";
  auto nodes = ParseNodes(text);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].partitions, (std::vector<std::string>{"gpu", "all"}));
  auto cat = TestCatalog(
      "  - {name: h800-typed, vendor: nvidia, domestic: false, price_per_card_hour: 7, "
      "throughput: {mlp-train: 1.0}, slurm_gres: 'gpu:h800'}\n");
  ASSERT_EQ(cat.Find("h800-typed")->slurm_gres, "gpu:h800");
  auto y = FleetYaml(*nodes, cat, ImportOptions{}, "f");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_NE(y->find("{id: a01/h800-typed, zone: gpu, type: h800-typed, cards: 8}"), std::string::npos) << *y;
  EXPECT_NE(y->find("{id: a01/ascend-910b, zone: gpu, type: ascend-910b, cards: 4}"), std::string::npos) << *y;
  EXPECT_NE(y->find("# node a01: GRES fpga:2 matches no catalog type"), std::string::npos) << *y;
  EXPECT_NE(y->find("# node a02 left out: state DOWN+NOT_RESPONDING"), std::string::npos) << *y;
  EXPECT_EQ(y->find("id: a02"), std::string::npos) << *y;
  EXPECT_EQ(SlurmNodeOf("a01/h800-typed"), "a01");
  ImportOptions down;
  down.include_down = true;
  down.zone = "z";
  y = FleetYaml(*nodes, cat, down, "f");
  ASSERT_TRUE(y.ok());
  EXPECT_NE(y->find("{id: a02, zone: z, type: h800-typed, cards: 8}"), std::string::npos) << *y;
  // No catalog GRES at all: an error that says how many nodes were read.
  auto none = FleetYaml(*ParseNodes("NodeName=x State=IDLE Gres=(null) Partitions=p\n"), cat, ImportOptions{}, "f");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no node has a GRES of a catalog type (1 nodes read)"), std::string::npos);
}

// `scontrol --oneliner show job 15` of a two-component het job, while component 1 still waits.
const char* kHetJob =
    "JobId=15 HetJobId=15 HetJobOffset=0 JobName=tessera-4-2 HetJobIdSet=15-16 UserId=nobody(65534) "
    "JobState=RUNNING Reason=None Dependency=(null) ExitCode=0:0 StartTime=2026-12-01T10:59:38 EndTime=Unknown "
    "NodeList=localhost BatchHost=localhost\n"
    "JobId=16 HetJobId=15 HetJobOffset=1 JobName=tessera-4-2 HetJobIdSet=15-16 UserId=nobody(65534) "
    "JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0 StartTime=Unknown EndTime=Unknown "
    "NodeList=(null)\n"
    "JobId=17 JobName=other JobState=RUNNING Reason=None ExitCode=0:0 StartTime=2026-12-01T10:59:30 NodeList=vm\n";

TEST(SlurmParse, HetJobRecordsCombine) {
  auto recs = ParseJobs(kHetJob);
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  ASSERT_EQ(recs->size(), 3u);
  auto mine = RecordsOf(*recs, 15);
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[1].id, 16);
  EXPECT_EQ(mine[1].het_offset, 1);
  EXPECT_EQ(mine[0].start_unix, ParseTime("2026-12-01T10:59:38"));
  EXPECT_EQ(mine[1].start_unix, -1);
  JobState s = Combine(mine);
  EXPECT_EQ(s.phase, Phase::kRunning);
  EXPECT_EQ(s.states, "RUNNING+PENDING");
  EXPECT_EQ(s.reason, "Resources");
  EXPECT_EQ(s.nodes, "localhost");
  // Both ended: one component's node failed → the job's node failed; start/end span the components.
  mine[0].state = "NODE_FAIL";
  mine[0].end_unix = 1000;
  mine[1].state = "CANCELLED";
  mine[1].start_unix = 400;
  mine[1].end_unix = 990;
  mine[0].exit_code = 143;
  s = Combine(mine);
  EXPECT_EQ(s.phase, Phase::kNodeFail);
  EXPECT_EQ(s.end_unix, 1000);
  EXPECT_EQ(s.exit_code, 143);
  mine[0].state = "FAILED";
  EXPECT_EQ(Combine(mine).phase, Phase::kCancelled);
  mine[1].state = "COMPLETED";
  EXPECT_EQ(Combine(mine).phase, Phase::kFailed);
  mine[0].state = "COMPLETED";
  EXPECT_EQ(Combine(mine).phase, Phase::kCompleted);
}

TEST(SlurmParse, StateMapping) {
  for (const char* st : {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD"}) EXPECT_EQ(PhaseOf(st), Phase::kPending);
  for (const char* st : {"RUNNING", "COMPLETING", "SUSPENDED", "SIGNALING"}) EXPECT_EQ(PhaseOf(st), Phase::kRunning);
  EXPECT_EQ(PhaseOf("COMPLETED"), Phase::kCompleted);
  for (const char* st : {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "PREEMPTED", "DEADLINE"})
    EXPECT_EQ(PhaseOf(st), Phase::kFailed) << st;
  EXPECT_EQ(PhaseOf("CANCELLED"), Phase::kCancelled);
  EXPECT_EQ(PhaseOf("CANCELLED+"), Phase::kCancelled);
  EXPECT_EQ(PhaseOf("NODE_FAIL"), Phase::kNodeFail);
}

TEST(SlurmParse, SacctJobcompAndDatabaseForms) {
  // `sacct -c -n -P -X -j 15,16 -o JobID,State,Start,End,ExitCode` with its stderr merged (22.05 complains
  // about the jobcomp file's het fields), then sacct with slurmdbd (N+K ids, steps, "CANCELLED by 0").
  const char* jobcomp =
      "sacct: error: Unknown type HetJobId: 15\nsacct: error: Unknown type HetJobOffset: 0\n"
      "15|COMPLETED|2026-12-01T10:59:38|2026-12-01T10:59:47|0:0\n"
      "16|COMPLETED|2026-12-01T10:59:38|2026-12-01T10:59:47|0:0\n";
  auto r = ParseSacct(jobcomp);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].id, 16);
  EXPECT_EQ((*r)[0].end_unix - (*r)[0].start_unix, 9);
  auto db = ParseSacct(
      "20+0|CANCELLED by 0|2026-12-01T11:00:00|2026-12-01T11:00:05|0:15\n"
      "20+0.batch|CANCELLED|2026-12-01T11:00:00|2026-12-01T11:00:05|0:15\n"
      "20+1|FAILED|2026-12-01T11:00:01|2026-12-01T11:00:04|143:0\n");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ASSERT_EQ(db->size(), 2u);
  EXPECT_EQ((*db)[0].het_id, 20);
  EXPECT_EQ((*db)[0].state, "CANCELLED");
  EXPECT_EQ((*db)[0].signal, 15);
  auto c = Combine(RecordsOf(*db, 20));
  EXPECT_EQ(c.phase, Phase::kCancelled);
  EXPECT_EQ(c.end_unix - c.start_unix, 5);
  EXPECT_FALSE(ParseSacct("x1|RUNNING|a|b\n").ok());
  EXPECT_EQ(ParseTime("Unknown"), -1);
  EXPECT_EQ(ParseTime("None"), -1);
}

TEST(SlurmSubmit, OneComponentPerTypeAndTheBatchScript) {
  SubmitRequest r;
  r.job_name = "tessera-3-1";
  r.workdir = "/w/admin/3";
  r.output = "/w/admin/3/slurm-attempt-1.log";
  r.script = "/s/jobs/3/attempt-1/job.sbatch";
  r.uid = 65534;
  r.gid = 65534;
  r.components = {{"npu", "main", {{"a1", 4}, {"a2", 4}}}, {"gpu", "main", {{"g1", 1}, {"g2", 2}}}};
  auto a = SbatchArgs(r);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::string line;
  for (const auto& w : *a) line += w + " ";
  EXPECT_EQ(line,
            "--parsable --job-name=tessera-3-1 --chdir=/w/admin/3 --output=/w/admin/3/slurm-attempt-1.log "
            "--open-mode=append --no-requeue --uid=65534 --gid=65534 --partition=main --nodelist=a1,a2 --nodes=2 "
            "--ntasks=8 --ntasks-per-node=4 --gres=npu:4 : --partition=main --nodelist=g1,g2 --nodes=2 --ntasks=3 "
            "--gres=gpu:2 /s/jobs/3/attempt-1/job.sbatch ");
  r.components[1].nodes.clear();
  EXPECT_FALSE(SbatchArgs(r).ok());
  std::string s = BatchScript({"/bin/tessera", "run", "--island", "ascend=host:8", "--", "it's"}, 2, "job 3");
  EXPECT_NE(s.find("exec srun --het-group=0,1 --kill-on-bad-exit=1 '/bin/tessera' 'run' '--island' "
                   "'ascend=host:8' '--' 'it'\\''s'\n"),
            std::string::npos)
      << s;
  EXPECT_NE(BatchScript({"x"}, 1, "c").find("exec srun --kill-on-bad-exit=1 'x'"), std::string::npos);
}

TEST(SlurmCommand, BoundedAndNamed) {
  auto ok = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, 5000);
  EXPECT_EQ(ok.exit_code, 3);
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.err, "err\n");
  EXPECT_NE(ok.Describe("sbatch").find("`sbatch` failed (exit 3): err"), std::string::npos) << ok.Describe("sbatch");
  // A command that does not answer is killed at its bound (with its children: the group).
  auto slow = RunCommand({"sh", "-c", "sleep 30 & sleep 30"}, 300);
  EXPECT_TRUE(slow.timed_out);
  EXPECT_EQ(slow.exit_code, -1);
  EXPECT_NE(slow.Describe("scontrol show job 1").find("did not answer within its time limit"), std::string::npos);
  auto missing = RunCommand({"no-such-sbatch-here"}, 5000);
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.Describe("no-such-sbatch-here").find("cannot start no-such-sbatch-here"), std::string::npos);
}

TEST(SlurmDaemon, RefusesToStartWithoutSbatch) {
  std::string dir = testing::MakeTempDir("slurm-nosbatch");
  std::string out;
  int rc = testing::Shell(
      fmt::format("env PATH=/nonexistent '{}' daemon --executor slurm --state-dir '{}/s' 2>&1", testing::Bin(), dir),
      &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--executor slurm: cannot start sbatch"), std::string::npos) << out;
  testing::Shell("rm -rf '" + dir + "'");
}

// Cards on an SM share of a GPU are a single-host emulation (one launcher's MPS daemon): the Slurm executor
// refuses them, at registration (the fleet) and at an attempt's start (the islands), saying so.
TEST(SlurmSmShare, RefusedForTheFleetAndForIslands) {
  auto fleet = ParseFleetSpec(
      "nodes:\n  - {id: g1, zone: main, type: nvidia-h800, cards: 1}\n"
      "  - {id: g2, zone: main, type: ascend-910b, cards: 1, sm_share: 35}\n",
      "fleet.yaml");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  Status s = CheckNoSmShare(*fleet);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("fleet.yaml:3: node 'g2' has sm_share 35, but the Slurm executor cannot run cards on an "
                             "SM share of a GPU"),
            std::string::npos)
      << s.message();
  auto host = ParseFleetSpec("emulated: true\nnodes:\n  - {id: g1, zone: main, type: nvidia-h800, cards: 1}\n", "f");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_TRUE(CheckNoSmShare(*host).ok());
  Island share{"ascend-910b", "ascend", "cuda", 1, true, 35, 0};
  Island plain{"nvidia-h800", "nvidia", "host", 1, true, 0, 0};
  EXPECT_TRUE(CheckNoSmShare(std::vector<Island>{plain}).ok());
  Status i = CheckNoSmShare(std::vector<Island>{plain, share});
  EXPECT_EQ(i.code(), Code::kUnsupported);
  EXPECT_NE(i.message().find("island ascend (ascend-910b) is emulated on an SM share of 35% of a GPU, which the Slurm "
                             "executor cannot run"),
            std::string::npos)
      << i.message();
}

TEST(SlurmSmShare, DaemonRefusesAnSmShareFleetAtStart) {
  std::string dir = testing::MakeTempDir("slurm-smshare");
  // An sbatch that answers --version is all the daemon checks before it reads the fleet. The directory is opened to
  // the job user (mkdtemp makes it 0700): a daemon started as root refuses a work directory its job user cannot reach
  // before it reads the fleet.
  testing::Shell(
      fmt::format("chmod 0755 '{0}' && mkdir -p '{0}/bin' && printf '#!/bin/sh\\necho slurm 22.05.8\\n' > "
                  "'{0}/bin/sbatch' && chmod +x '{0}/bin/sbatch'",
                  dir));
  testing::WriteText(dir + "/fleet.yaml",
                     "nodes:\n  - {id: g1, zone: main, type: nvidia-h800, cards: 1, sm_share: 65}\n");
  std::string out;
  int rc = testing::Shell(fmt::format("env PATH='{0}/bin':\"$PATH\" '{1}' daemon --executor slurm --state-dir '{0}/s' "
                                      "--fleet '{0}/fleet.yaml' 2>&1",
                                      dir, testing::Bin()),
                          &out);
  EXPECT_EQ(rc, 4) << out;  // unsupported (the exit-code table: a daemon that cannot start exits 2 or 4, not 1)
  EXPECT_NE(out.find("fleet.yaml:2: node 'g1' has sm_share 65, but the Slurm executor cannot run"), std::string::npos)
      << out;
  testing::Shell("rm -rf '" + dir + "'");
}

}  // namespace
}  // namespace tessera::daemon::slurm
