#pragma once
/// nn::holders: a module holder (nn::ModuleHolder) for every built-in layer, under the layer's own name, for code
/// written in libtorch's shape. With `namespace nn = tapegrad::nn::holders;` a port keeps its members and calls
/// as they were:
///   nn::Linear fc{nullptr};                       // empty until assigned
///   nn::ReLU relu;                                // built, never null by accident
///   fc = register_module("fc", nn::Linear(3, 4)); // returns the holder
///   x = relu(fc(x)); fc->weight; nn::Sequential seq(nn::Linear(3, 4), nn::ReLU()); seq->push_back(nn::Tanh());
/// Every other name (options, nn::Module, functions) reaches through to tapegrad::nn.
#include <tapegrad/export.h>

#include <tapegrad/framework/module_holder.h>
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/conv.h>
#include <tapegrad/layers/conv_transpose.h>
#include <tapegrad/layers/dropout.h>
#include <tapegrad/layers/embedding.h>
#include <tapegrad/layers/flatten.h>
#include <tapegrad/layers/group_norm.h>
#include <tapegrad/layers/instance_norm.h>
#include <tapegrad/layers/layer_norm.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/loss.h>
#include <tapegrad/layers/multihead_attention.h>
#include <tapegrad/layers/pool.h>
#include <tapegrad/layers/rnn.h>
#include <tapegrad/layers/rnn_cell.h>
#include <tapegrad/layers/sequential.h>
#include <tapegrad/layers/transformer_decoder.h>
#include <tapegrad/layers/transformer_encoder.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn::holders {

// Note: a name declared here hides tapegrad::nn's for qualified lookup (nn::holders::Linear is the holder);
// any other name is found through the using-directive (nn::holders::LinearOptions is nn::LinearOptions).
using namespace tapegrad::nn;

using AdaptiveAvgPool2d = ModuleHolder<nn::AdaptiveAvgPool2d>;
using AvgPool2d = ModuleHolder<nn::AvgPool2d>;
using BCELoss = ModuleHolder<nn::BCELoss>;
using BCEWithLogitsLoss = ModuleHolder<nn::BCEWithLogitsLoss>;
using BatchNorm1d = ModuleHolder<nn::BatchNorm1d>;
using BatchNorm2d = ModuleHolder<nn::BatchNorm2d>;
using BatchNorm3d = ModuleHolder<nn::BatchNorm3d>;
using Conv2d = ModuleHolder<nn::Conv2d>;
using ConvTranspose2d = ModuleHolder<nn::ConvTranspose2d>;
using CrossEntropyLoss = ModuleHolder<nn::CrossEntropyLoss>;
using Dropout = ModuleHolder<nn::Dropout>;
using Dropout2d = ModuleHolder<nn::Dropout2d>;
using Embedding = ModuleHolder<nn::Embedding>;
using Flatten = ModuleHolder<nn::Flatten>;
using GELU = ModuleHolder<nn::GELU>;
using GRU = ModuleHolder<nn::GRU>;
using GRUCell = ModuleHolder<nn::GRUCell>;
using GroupNorm = ModuleHolder<nn::GroupNorm>;
using InstanceNorm1d = ModuleHolder<nn::InstanceNorm1d>;
using InstanceNorm2d = ModuleHolder<nn::InstanceNorm2d>;
using LSTM = ModuleHolder<nn::LSTM>;
using LSTMCell = ModuleHolder<nn::LSTMCell>;
using LayerNorm = ModuleHolder<nn::LayerNorm>;
using LeakyReLU = ModuleHolder<nn::LeakyReLU>;
using Linear = ModuleHolder<nn::Linear>;
using LogSoftmax = ModuleHolder<nn::LogSoftmax>;
using MaxPool2d = ModuleHolder<nn::MaxPool2d>;
using MultiheadAttention = ModuleHolder<nn::MultiheadAttention>;
using NLLLoss = ModuleHolder<nn::NLLLoss>;
using RNN = ModuleHolder<nn::RNN>;
using RNNCell = ModuleHolder<nn::RNNCell>;
using ReLU = ModuleHolder<nn::ReLU>;
using Sequential = ModuleHolder<nn::Sequential>;
using Sigmoid = ModuleHolder<nn::Sigmoid>;
using Softmax = ModuleHolder<nn::Softmax>;
using Tanh = ModuleHolder<nn::Tanh>;
using Transformer = ModuleHolder<nn::Transformer>;
using TransformerDecoder = ModuleHolder<nn::TransformerDecoder>;
using TransformerDecoderLayer = ModuleHolder<nn::TransformerDecoderLayer>;
using TransformerEncoder = ModuleHolder<nn::TransformerEncoder>;
using TransformerEncoderLayer = ModuleHolder<nn::TransformerEncoderLayer>;

}  // namespace tapegrad::nn::holders

TAPEGRAD_API_END
