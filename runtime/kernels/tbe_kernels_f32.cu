// float weights: the TBE forward and update kernels instantiated for float. A translation unit
// of its own so that it compiles in parallel with tbe_kernels.cu (sort / scan steps, host API)
// and the 16-bit instantiations.
#include "tbe_impl.cuh"

namespace tbe {
namespace detail {

template cudaError_t forward_typed<float>(const ForwardArgs&, cudaStream_t);
template cudaError_t update_typed<float>(const BackwardArgs&, const Scratch&, int, cudaStream_t);

}  // namespace detail
}  // namespace tbe
