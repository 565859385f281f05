// The loss curve of a training run as an SVG image: train loss per iteration and val loss per
// evaluation, read from the run's loss.csv; viewable in any browser, no other tool needed.
#pragma once
#include <string>

namespace ember::app {

// Reads `csv_path` (iter,train_loss,val_loss,lr,ms rows, as ember-gpt train writes them) and
// writes the plot to `svg_path`. Returns false, writing nothing, when the file holds no loss.
bool write_loss_plot(const std::string& csv_path, const std::string& svg_path);

}  // namespace ember::app
