# Scale-out tests with real launchers (ctest label "scaleout"; included from tests/CMakeLists.txt):
# a single-node Slurm started by the test (munged, slurmctld, slurmd) running a job array plus
# the dependent merge, and mpirun -np 3. Registered only when the programs are built and the
# packages are installed (scripts/setup.sh: slurm-wlm munge openmpi-bin); scripts/test.sh runs
# the label on its own, after the parallel unit tests. docs/scale-out.md says what they check.
if(KVPHASE_SANITIZE OR NOT KVPHASE_BUILD_EXAMPLES)
  return()
endif()
find_program(KVPHASE_SLURMCTLD slurmctld PATHS /usr/sbin NO_CACHE)
find_program(KVPHASE_SLURMD slurmd PATHS /usr/sbin NO_CACHE)
find_program(KVPHASE_MUNGED munged PATHS /usr/sbin NO_CACHE)
find_program(KVPHASE_SBATCH sbatch NO_CACHE)
find_program(KVPHASE_MPIRUN mpirun NO_CACHE)
set(_kv_so ${CMAKE_CURRENT_SOURCE_DIR}/scaleout)
if(KVPHASE_SLURMCTLD AND KVPHASE_SLURMD AND KVPHASE_MUNGED AND KVPHASE_SBATCH)
  add_test(NAME scaleout.slurm_array
    COMMAND bash ${_kv_so}/slurm_array_test.sh $<TARGET_FILE_DIR:kvphase-sweep> ${PROJECT_SOURCE_DIR})
  set_tests_properties(scaleout.slurm_array PROPERTIES LABELS "scaleout" TIMEOUT 240 RUN_SERIAL TRUE
    PASS_REGULAR_EXPRESSION "ok: study of 12 units")
endif()
if(KVPHASE_MPIRUN)
  add_test(NAME scaleout.mpirun COMMAND bash ${_kv_so}/mpi_test.sh $<TARGET_FILE_DIR:kvphase-sweep>)
  set_tests_properties(scaleout.mpirun PROPERTIES LABELS "scaleout" TIMEOUT 90 RUN_SERIAL TRUE
    PASS_REGULAR_EXPRESSION "ok: mpirun -np 3")
endif()
