# The suite's longest tests, with their seconds in the slowest stage of the test command (TSan or
# qemu, measured in one fresh-clone run), as ctest's COST: ctest -j starts them first. On a fresh
# build ctest has no timings of its own and runs tests in order, so the longest ones, listed late,
# ran alone on one core at the end (TSan: 63 s for the MixtralLike test, begun 531st of 531).
# Only the order changes. A name that no longer exists is ignored by ctest (so keep them current).
# Parameterised tests are left out: their ctest names carry gtest's "# GetParam() = ..." text.
set(fflite_test_costs
  CpuMoeLargerTest.MixtralLikePrefillAndDecode 63
  QuantShapeTest.OddShapesTokensAndThreads 30
  CpuLargerTest.LlamaLikeSwiGlu 32
  CpuOptionsTest.EveryPackedEngineMatchesReference 30
  GemmTest.EveryKernelMatchesTheDoubleProduct 22
  QuantizeStudy.SwigluOutputNmseAgainstF32 21
  QuantizeTest.SearchIsWithinAHairOfExhaustive 14
  EmbeddingTest.FloatActivationsAreBatchInvariantOnQuantisedWeights 14
  EmbeddingTest.InPlaceRunsGiveTheBitsOfSeparateBuffers 9
  EmbeddingTest.CallersPoolGivesTheBitsOfOwnPoolAndNoThreadOfItsOwn 7
  CpuMoeGemmTest.EveryBf16KernelOnPackedExperts 12
  CpuLargerTest.BertLikeGeluPostLayerNorm 9
  ConverterKillTest.KilledConversionLeavesDestinationUntouched 8
  QuantMoeTest.RoutedAndSharedExperts 7
  QuantKernelSetsTest.EveryKernelMatchesReference 7
)
while(fflite_test_costs)
  list(POP_FRONT fflite_test_costs name cost)
  set_tests_properties(${name} PROPERTIES COST ${cost})
endwhile()

# Under the ARM stages' second CPU model (platforms/raspberrypi/build.sh) these are left out too
# (label threads_and_shapes): the CPU backend's tests of many thread counts, shapes, budgets and
# larger layers, the longest of that run (126 s of the cortex-a8's 336 s of test time). Their
# CPU-dependent code is the kernels', every one of which the first model's kernel tests run (its
# kernel lists are a superset), and the backend's choice among the second model's kernels is run
# by the CPU backend's other tests. They are in binaries without a label of their own.
set(fflite_first_model_only
  QuantShapeTest.OddShapesTokensAndThreads
  CpuOptionsTest.EveryPackedEngineMatchesReference
  GemmTest.EveryKernelMatchesTheDoubleProduct
  QuantMoeTest.ExpertProductsSharedAmongThreads
  CpuMoeStreamTest.ReadAheadKeepsTheBitsAndIsUsed
  QuantThreadsTest.SameBitsForOneAndThreeThreads
  CpuLargerTest.LlamaLikeSwiGlu
  CpuMoeThreadsTest.ExpertsAloneGiveTheSameBits
)
foreach(name IN LISTS fflite_first_model_only)
  set_tests_properties(${name} PROPERTIES LABELS threads_and_shapes)
endforeach()
