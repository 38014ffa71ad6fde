// ONNX forms of the layout ops: reshapes and views, transposes, slices, select, cat / stack, expand, the
// sums that reduce to a shape, index_select.
#include <limits>

#include <tapegrad/framework/onnx/detail/graph.h>

namespace tapegrad::onnx::detail {

namespace {

using Ints = std::vector<std::int64_t>;

// reshape, view, flatten, squeeze, unsqueeze: the output's shape, with dynamic extents kept symbolic.
void reshape(Context& c) { c.emit("Reshape", {c.input(0), c.reshape_target()}, {}, {c.output()}); }

void transpose(Context& c) { c.emit("Transpose", {c.input(0)}, {{"perm", c.ints("perm")}}, {c.output()}); }

void slice(Context& c) {
  const Value& x = c.input_value(0);
  const std::int64_t dim = c.i("dim");
  const auto d = static_cast<std::size_t>(dim);
  const std::int64_t start = c.i("start"), step = c.i("step");
  // Note: a slice to the end of a dynamic axis reports that axis' extent as its end, different in the two
  // forwards; ONNX's "to the end" is INT64_MAX. A start counted from the end differs too: i() refuses it.
  const auto* end_a = std::get_if<std::int64_t>(c.raw("end"));
  const auto* end_b = std::get_if<std::int64_t>(c.raw("end", true));
  if (!end_a || !end_b) c.unsupported("the op did not report its end");
  std::int64_t end = *end_a;
  if (*end_a != *end_b || (x.dynamic(d) && *end_a == x.shape[d])) {
    if (*end_a != x.shape[d] || *end_b != x.shape_b[d]) c.unsupported("its end depends on a dynamic axis");
    end = std::numeric_limits<std::int64_t>::max();
  }
  c.emit("Slice", {c.input(0), c.int64s({start}), c.int64s({end}), c.int64s({dim}), c.int64s({step})}, {},
         {c.output()});
}

void select(Context& c) {
  const Value& x = c.input_value(0);
  const std::int64_t dim = c.i("dim");
  if (x.dynamic(static_cast<std::size_t>(dim))) c.unsupported("a select along a dynamic axis");
  // Note: a 0-d index makes Gather drop the axis, as select does.
  const std::string index = c.scalar(static_cast<double>(c.i("index")), DType::Int64);
  c.emit("Gather", {c.input(0), index}, {{"axis", dim}}, {c.output()});
}

void cat(Context& c) {
  std::vector<std::string> in;
  for (std::size_t i = 0; i < c.input_count(); ++i) in.push_back(c.input(i));
  c.emit("Concat", in, {{"axis", c.i("dim")}}, {c.output()});
}

void stack(Context& c) {
  const std::int64_t dim = c.i("dim");
  std::vector<std::string> in;
  for (std::size_t i = 0; i < c.input_count(); ++i) in.push_back(c.emit("Unsqueeze", {c.input(i), c.int64s({dim})}));
  c.emit("Concat", in, {{"axis", dim}}, {c.output()});
}

// expand, broadcast_to: Expand broadcasts both ways, so a dynamic extent the input already has is given as 1.
void expand(Context& c) {
  const Value& x = c.input_value(0);
  const Value& y = c.output_value(0);
  const std::size_t lead = y.shape.size() - x.shape.size();
  Ints target;
  for (std::size_t d = 0; d < y.shape.size(); ++d) {
    if (!y.dynamic(d)) {
      target.push_back(y.shape[d]);
    } else if (d >= lead && x.dynamic(d - lead)) {
      target.push_back(1);
    } else {
      c.unsupported("an expand to a dynamic extent the input does not have");
    }
  }
  c.emit("Expand", {c.input(0), c.int64s(target)}, {}, {c.output()});
}

// sum_to (sum, mean): the leading dims the output lacks are summed away, then the dims it keeps as 1.
void sum_to(Context& c) {
  const Value& x = c.input_value(0);
  const Value& y = c.output_value(0);
  const std::size_t lead = x.shape.size() - y.shape.size();
  std::string v = c.input(0);
  Ints leading, kept;
  for (std::size_t d = 0; d < lead; ++d) leading.push_back(static_cast<std::int64_t>(d));
  for (std::size_t d = lead; d < x.shape.size(); ++d)
    if (y.shape[d - lead] == 1 && !y.dynamic(d - lead) && (x.shape[d] != 1 || x.shape_b[d] != 1))
      kept.push_back(static_cast<std::int64_t>(d - lead));
  // Note: from opset 13 ReduceSum takes its axes as an input; an empty list would mean every axis.
  if (!leading.empty()) v = c.emit("ReduceSum", {v, c.int64s(leading)}, {{"keepdims", std::int64_t{0}}});
  if (!kept.empty()) v = c.emit("ReduceSum", {v, c.int64s(kept)}, {{"keepdims", std::int64_t{1}}});
  c.emit("Identity", {v}, {}, {c.output()});
}

void index_select(Context& c) {
  c.emit("Gather", {c.input(0), c.tensor("index")}, {{"axis", c.i("dim")}}, {c.output()});
}

}  // namespace

void add_shape_converters(std::map<std::string, Converter>& table) {
  for (const char* op : {"reshape", "view", "flatten", "squeeze", "unsqueeze"}) table[op] = reshape;
  table["transpose"] = transpose;
  table["permute"] = transpose;
  table["slice"] = slice;
  table["select"] = select;
  table["cat"] = cat;
  table["stack"] = stack;
  table["expand"] = expand;
  table["broadcast_to"] = expand;
  table["sum_to"] = sum_to;
  table["index_select"] = index_select;
}

}  // namespace tapegrad::onnx::detail
