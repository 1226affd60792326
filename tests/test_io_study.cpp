// Scale-out inputs: the shard of a launcher's environment (sim::shard_from_environment), the one
// "i/N" parser, and study files (io::parse_study, unit and task mapping, the tidy join).
#include <catch2/catch.hpp>

#include <kvphase/io/provenance.hpp>
#include <kvphase/io/study.hpp>
#include <kvphase/sim/shard.hpp>

#include <map>
#include <string>

namespace io = kvphase::io;
namespace sim = kvphase::sim;

namespace {
using env_map = std::map<std::string, std::string>;
sim::launched_shard from(const env_map& env) {
  return sim::shard_from_environment([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
std::string message(const env_map& env) {
  try {
    (void)from(env);
  } catch (const kvphase::error& e) {
    return e.what();
  }
  return "(no error)";
}
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const kvphase::error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("shard from a Slurm job array", "[io][scaleout]") {
  const env_map base{{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_MIN", "3"}, {"SLURM_ARRAY_TASK_MAX", "6"},
                     {"SLURM_ARRAY_JOB_ID", "41"}, {"SLURM_JOB_ID", "44"},       {"SLURM_PROCID", "0"}};
  const auto s = from(base);
  CHECK(s.shard == sim::shard_spec{2, 4});
  CHECK(s.launcher == "slurm-array");
  CHECK(s.job == "SLURM_ARRAY_JOB_ID=41 SLURM_ARRAY_TASK_ID=5 SLURM_JOB_ID=44");
  // _COUNT instead of _MAX, a step of 2, and a consistent _COUNT next to _MAX
  auto e = base;
  e.erase("SLURM_ARRAY_TASK_MAX");
  e["SLURM_ARRAY_TASK_COUNT"] = "4";
  CHECK(from(e).shard == sim::shard_spec{2, 4});
  e = base;
  e["SLURM_ARRAY_TASK_STEP"] = "2";
  e["SLURM_ARRAY_TASK_MAX"] = "9";
  e["SLURM_ARRAY_TASK_COUNT"] = "4";
  CHECK(from(e).shard == sim::shard_spec{1, 4});
  // an array with gaps (--array=0,2,5) cannot be sharded
  e = base;
  e["SLURM_ARRAY_TASK_COUNT"] = "3";
  CHECK_THAT(message(e), Catch::Contains("SLURM_ARRAY_TASK_COUNT = 3") && Catch::Contains("gaps"));
  e = base;
  e["SLURM_ARRAY_TASK_STEP"] = "3";  // tasks 3 and 6: 5 is none of them
  CHECK_THAT(message(e), Catch::Contains("SLURM_ARRAY_TASK_ID = 5") && Catch::Contains("MIN + k * STEP"));
  e = base;
  e.erase("SLURM_ARRAY_TASK_MIN");
  CHECK_THAT(message(e), Catch::Contains("SLURM_ARRAY_TASK_MIN"));
  e = base;
  e.erase("SLURM_ARRAY_TASK_MAX");
  CHECK_THAT(message(e), Catch::Contains("SLURM_ARRAY_TASK_MAX") && Catch::Contains("SLURM_ARRAY_TASK_COUNT"));
}

TEST_CASE("shard from srun steps, mpirun, and both inside an array task", "[io][scaleout]") {
  const auto step = from({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_JOB_ID", "8"}});
  CHECK(step.shard == sim::shard_spec{2, 3});
  CHECK(step.launcher == "slurm-step");
  CHECK(step.job == "SLURM_JOB_ID=8 SLURM_STEP_ID=0 SLURM_PROCID=2 SLURM_NTASKS=3");
  // the batch script of a plain job has SLURM_PROCID but no step id: no launcher
  CHECK_THAT(message({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}), Catch::Contains("shard = auto: found no launcher"));
  CHECK_THAT(message({}), Catch::Contains("--shard i/N"));
  // mpirun inside a Slurm allocation: the MPI ranks win over the inherited SLURM_PROCID
  const auto mpi = from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"SLURM_STEP_ID", "0"},
                         {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  CHECK(mpi.shard == sim::shard_spec{1, 3});
  CHECK(mpi.launcher == "openmpi");
  // array task 2 of 0-3 running 3 ranks: shard 2·3 + 1 of 12
  const auto both = from({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_MAX", "3"},
                          {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}});
  CHECK(both.shard == sim::shard_spec{7, 12});
  CHECK(both.launcher == "slurm-array+openmpi");
  // srun -n1 inside an array task adds nothing
  CHECK(from({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_COUNT", "2"},
              {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}})
            .launcher == "slurm-array");
  CHECK_THAT(message({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}}),
             Catch::Contains("OMPI_COMM_WORLD_RANK = 3"));
  CHECK_THAT(message({{"OMPI_COMM_WORLD_RANK", "0"}}), Catch::Contains("OMPI_COMM_WORLD_SIZE"));
  CHECK_THAT(message({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}}), Catch::Contains("SLURM_NTASKS"));
}

TEST_CASE("launcher environment values are parsed strictly", "[io][scaleout]") {
  for (const char* bad : {"", " 1", "1 ", "+1", "-1", "0x1", "1e3", "1.0", "١", "99999999999999999999", "2000000"}) {
    const std::string m = message({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", bad}});
    CHECK_THAT(m, Catch::Contains("OMPI_COMM_WORLD_SIZE =") && Catch::Contains("decimal integer"));
    CHECK(m.size() < 300);
  }
  // a long hostile value is quoted in short
  const std::string m = message({{"SLURM_ARRAY_TASK_ID", std::string(5000, 'x')}});
  CHECK_THAT(m, Catch::Contains("SLURM_ARRAY_TASK_ID = xxx"));
  CHECK(m.size() < 300);
  // shards beyond 2^20 in all
  CHECK_THAT(message({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_MAX", "2047"},
                      {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1024"}}),
             Catch::Contains("2^20"));
}

TEST_CASE("one i/N parser: sim::shard_spec::parse and io::parse_shard agree", "[io][scaleout]") {
  for (const char* good : {"0/1", "3/4", "1048575/1048576", "007/8"}) {
    const auto s = sim::shard_spec::parse(good);
    CHECK(io::parse_shard(good) == std::pair<std::int64_t, std::int64_t>{s.index, s.count});
  }
  for (const char* bad : {"4/4", "1/0", "-1/2", "a/2", "1/", "/2", "12", "", "1/2/3", "1 /2", "0/1048577",
                          "0/99999999999999999999", "+1/2"}) {
    CHECK_THROWS_WITH(sim::shard_spec::parse(bad, "--shard"), Catch::Contains("--shard"));
    CHECK_THROWS_WITH(io::parse_shard(bad, "p.shard"), Catch::Contains("p.shard") && Catch::Contains("N <= 2^20"));
  }
}

TEST_CASE("study files: units, labels and the array task mapping", "[io][scaleout]") {
  const auto s = io::parse_study(R"({"study": "grid-1", "shards": 3,
      "fixed": {"task": "needle", "trials": 40, "theory": true, "quiet-ish": false, "gate-bias": [3, 0.5]},
      "axes": {"preset": ["mean", "gated"], "stride": [2, 4, 8]}})",
                                 "s.json");
  CHECK(s.name == "grid-1");
  CHECK(s.units() == 6);
  CHECK(s.tasks() == 18);
  CHECK(s.hash.size() == 16);
  CHECK(s.unit_label(0) == "preset=mean stride=2");
  CHECK(s.unit_label(4) == "preset=gated stride=4");
  const auto f = s.unit_flags(5);
  REQUIRE(f.size() == 6);  // task, trials, theory, gate-bias (false flag left out), preset, stride
  CHECK(f[0] == io::study_flag{"task", "needle"});
  CHECK(f[1] == io::study_flag{"trials", "40"});
  CHECK(f[2] == io::study_flag{"theory", std::nullopt});
  CHECK(f[3] == io::study_flag{"gate-bias", "3,0.5"});
  CHECK(f[5] == io::study_flag{"stride", "8"});
  CHECK(io::study_task(s, 0, 18) == std::pair<std::int64_t, std::int64_t>{0, 0});
  CHECK(io::study_task(s, 17, 18) == std::pair<std::int64_t, std::int64_t>{5, 2});
  CHECK(io::study_task(s, 7, 18) == std::pair<std::int64_t, std::int64_t>{2, 1});
  CHECK_THAT(message_of([&] { (void)io::study_task(s, 0, 17); }), Catch::Contains("--array=0-17"));
  CHECK_THAT(message_of([&] { (void)s.unit_flags(6); }), Catch::Contains("unit = 6"));
  // the hash follows the content, not the layout
  const auto same = io::parse_study(R"({"study":"grid-1","shards":3,"fixed":{"task":"needle","trials":40,
      "theory":true,"quiet-ish":false,"gate-bias":[3,0.5]},"axes":{"preset":["mean","gated"],"stride":[2,4,8]}})");
  CHECK(same.hash == s.hash);
  CHECK(io::parse_study(R"({"study":"grid-1","shards":3,"axes":{"stride":[2,4]}})").hash != s.hash);
  CHECK(io::parse_study(R"({"study": "no-axes", "axes": {}})").units() == 1);
}

TEST_CASE("study files: strict errors name the file, the key and the value", "[io][scaleout]") {
  auto err = [](const std::string& text) { return message_of([&] { (void)io::parse_study(text, "s.json"); }); };
  CHECK_THAT(err("{"), Catch::Contains("s.json = byte"));
  CHECK_THAT(err("[]"), Catch::Contains("s.json = (an array of 0)"));
  CHECK_THAT(err(R"({"axes": {}})"), Catch::Contains("s.json.study"));
  CHECK_THAT(err(R"({"study": "a b", "axes": {}})"), Catch::Contains("s.json.study = \"a b\""));
  CHECK_THAT(err(R"({"study": "x", "axes": {}, "extra": 1})"), Catch::Contains("s.json key extra"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"stride": [2], "stride": [4]}})"),
             Catch::Contains("s.json key stride = (twice)"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"stride": []}})"), Catch::Contains("s.json.axes.stride = (an array of 0)"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"stride": [2, 2]}})"), Catch::Contains("s.json.axes.stride[1] = 2: repeats"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"stride": [{"a": 1}]}})"), Catch::Contains("s.json.axes.stride[0]"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"task": ["-x"]}})"), Catch::Contains("not starting with '-'"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"Stride": [2]}})"), Catch::Contains("s.json.axes key = Stride"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"shard": ["0/2"]}})"), Catch::Contains("run-time flag"));
  CHECK_THAT(err(R"({"study": "x", "axes": {"threads": [2]}})"), Catch::Contains("run-time flag"));
  CHECK_THAT(err(R"({"study": "x", "fixed": {"stride": 2}, "axes": {"stride": [4]}})"),
             Catch::Contains("s.json.axes.stride = (also in fixed)"));
  CHECK_THAT(err(R"({"study": "x", "shards": 0, "axes": {}})"), Catch::Contains("s.json.shards = 0"));
  CHECK_THAT(err(R"({"study": "x", "shards": 1.5, "axes": {}})"), Catch::Contains("s.json.shards = 1.5"));
  CHECK_THAT(err(R"({"study": "x", "fixed": {"gate-bias": [1, "a"]}, "axes": {}})"),
             Catch::Contains("s.json.fixed.gate-bias"));
  // more than 2^20 units or array tasks
  std::string big = R"({"study": "x", "axes": {)";
  for (int a = 0; a < 3; ++a) {
    if (a) big += ',';
    big += "\"a" + std::to_string(a) + "\": [";
    for (int v = 0; v < 128; ++v) {
      if (v) big += ',';
      big += std::to_string(v);
    }
    big += "]";
  }
  CHECK_THAT(err(big + "}}"), Catch::Contains("s.json.axes.a2") && Catch::Contains("2^20 units"));
  CHECK_THAT(err(R"({"study": "x", "shards": 1048576, "axes": {"a": [1, 2]}})"), Catch::Contains("2^20 array tasks"));
}

TEST_CASE("study tables join with the union of the columns and a unit column", "[io][scaleout]") {
  const std::string a = "# prov\nmodel,phase,context\ncompressed,0,512\n";
  const std::string b = "# prov\nmodel,phase,lengths\nfull,1,\"4,5\"\n";
  CHECK(io::join_study_tables({{0, a}, {1, b}}) ==
        "model,phase,context,lengths,unit\ncompressed,0,512,,0\nfull,1,,\"4,5\",1\n");
}
