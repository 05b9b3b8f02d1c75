// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Scalar activation functions as e3nn applies them: phi~(x) = cst * phi(x), where cst is the
// normalize2mom constant that makes E[phi~(z)^2] = 1 for z ~ N(0, 1). e3nn estimates cst by Monte
// Carlo (math/_normalize_activation.py: 1e6 float64 normal samples from a CPU torch generator
// seeded with 0), so the value cannot be re-derived in C++; this file tabulates e3nn 0.6.0's
// values, and every consumer also accepts an explicit cst, because a model file carries the
// constant its module actually used. The parity of each function drives e3nn's rule for odd
// scalars (nn.Activation).
#pragma once

#include <cmath>
#include <string>

namespace clebsch {

/// The elementary activation functions. New kinds go at the end; every switch over this enum
/// lives in activation.{h,cpp}.
enum class ActivationKind {
  kIdentity,  ///< phi(x) = x
  kSilu,      ///< phi(x) = x * sigmoid(x) (torch.nn.functional.silu)
  kTanh,      ///< phi(x) = tanh(x)
};

/// e3nn's normalize2mom(silu).cst in e3nn 0.6.0 / float64.
inline constexpr double kNormalize2momSilu = 1.6791767923989418;
/// e3nn's normalize2mom(tanh).cst in e3nn 0.6.0 / float64.
inline constexpr double kNormalize2momTanh = 1.5937334472592695;
/// e3nn's normalize2mom(lambda x: x).cst: the Monte-Carlo estimate of E[z^2]^(-1/2) is not 1, and
/// it is far enough from 1 (more than 1e-4) that e3nn does scale an explicit identity by it. An
/// absent activation (None in e3nn) is not scaled at all: see ScaledActivation::none().
inline constexpr double kNormalize2momIdentity = 1.001110600838467;

/// Lower-case name: "identity", "silu", "tanh".
std::string activation_name(ActivationKind kind);

/// Inverse of activation_name(). @throws Error naming the string when it is unknown.
ActivationKind activation_from_name(const std::string& name);

/// Parity of phi: +1 if even (phi(-x) = phi(x)), -1 if odd (phi(-x) = -phi(x)), 0 if neither.
/// e3nn's nn.Activation measures this numerically; here it is exact.
int activation_parity(ActivationKind kind);

/// e3nn's normalize2mom constant for @p kind (the tabulated kNormalize2mom* values).
double normalize2mom_cst(ActivationKind kind);

/// The constant e3nn's normalize2mom module actually multiplies by, given its attribute `cst`:
/// normalize2mom skips the multiplication (uses 1) when |cst - 1| < 1e-4.
double normalize2mom_effective(double cst);

/// phi~(x) = cst * phi(x): an activation together with its scale. Immutable value type.
class ScaledActivation {
 public:
  /// @throws Error if @p cst is not finite and positive.
  ScaledActivation(ActivationKind kind, double cst);

  /// phi with e3nn's tabulated normalize2mom constant (what nn.Activation/FullyConnectedNet/Gate
  /// build from a plain function).
  static ScaledActivation normalized(ActivationKind kind) {
    return ScaledActivation(kind, normalize2mom_cst(kind));
  }
  /// No activation (None in e3nn's act lists): the identity, unscaled.
  static ScaledActivation none() { return ScaledActivation(ActivationKind::kIdentity, 1.0); }

  ActivationKind kind() const { return kind_; }
  double cst() const { return cst_; }
  /// Parity of phi~ (that of phi): see activation_parity().
  int parity() const { return activation_parity(kind_); }
  /// "silu*1.6791767923989418"-style description for messages.
  std::string str() const;

  /// phi~(x).
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(cst_) * raw(x);
  }

  /// phi~(x) and its derivative phi~'(x) in one evaluation.
  template <class T>
  void value_and_derivative(T x, T* value, T* derivative) const {
    const T c = static_cast<T>(cst_);
    switch (kind_) {
      case ActivationKind::kSilu: {
        const T s = sigmoid(x);
        *value = c * (x * s);
        // d/dx x*sigma(x) = sigma + x*sigma*(1-sigma) = sigma*(1 + x*(1-sigma)).
        *derivative = c * (s * (T(1) + x * (T(1) - s)));
        return;
      }
      case ActivationKind::kTanh: {
        const T t = std::tanh(x);
        *value = c * t;
        *derivative = c * (T(1) - t * t);
        return;
      }
      case ActivationKind::kIdentity:
      default:
        *value = c * x;
        *derivative = c;
        return;
    }
  }

  /// phi~'(x).
  template <class T>
  T derivative(T x) const {
    T v, d;
    value_and_derivative(x, &v, &d);
    return d;
  }

  bool operator==(const ScaledActivation& o) const { return kind_ == o.kind_ && cst_ == o.cst_; }
  bool operator!=(const ScaledActivation& o) const { return !(*this == o); }

 private:
  template <class T>
  static T sigmoid(T x) {
    // For x -> -inf, exp(-x) overflows to inf and the quotient is 0, which is the right limit.
    return T(1) / (T(1) + std::exp(-x));
  }

  template <class T>
  T raw(T x) const {
    switch (kind_) {
      case ActivationKind::kSilu:
        return x * sigmoid(x);
      case ActivationKind::kTanh:
        return std::tanh(x);
      case ActivationKind::kIdentity:
      default:
        return x;
    }
  }

  ActivationKind kind_;
  double cst_;
};

}  // namespace clebsch
