"""An LSTM's final cell state from given (h0, c0), then a linear layer on the last step's output beside it
(KernelBench level 3 #35 and #37 in small), and an RNN of ReLUs without biases on the same input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 10, num_layers=3, batch_first=True)
        self.rnn = nn.RNN(5, 7, nonlinearity="relu", bias=False)
        self.fc = nn.Linear(10, 4)
        self.h0 = torch.randn(3, 2, 10)
        self.c0 = torch.randn(3, 2, 10)

    def forward(self, x):
        out, (_, c_n) = self.lstm(x, (self.h0, self.c0))
        return c_n, self.fc(out[:, -1, :]), self.rnn(x)[0]


def get_inputs():
    return [torch.randn(2, 30, 5)]


def get_init_inputs():
    return []
