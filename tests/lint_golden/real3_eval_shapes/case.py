"""Real shape 3: evaluation loops that walk a tensor in fixed strides (a language model over
token chunks) or slice a held-out tensor, besides `for x, y in loader`. A generation loop
that feeds each output back in is not evaluation. `# want: CODE` lines must be reported at
low or above; `# trap` lines must not be."""
import math

import torch
import torch.nn.functional as F

SEQ_LEN = 35


def batchify(tokens, n_columns, device):
    usable = tokens.size(0) // n_columns * n_columns
    return tokens[:usable].view(n_columns, -1).t().contiguous().to(device)


def chunk(source, start):
    length = min(SEQ_LEN, len(source) - 1 - start)
    return source[start:start + length], source[start + 1:start + 1 + length].reshape(-1)


def evaluate(lm, source, vocab_size, criterion):
    lm.eval()
    total = 0.0
    hidden = lm.init_hidden(source.size(1))
    with torch.no_grad():
        for start in range(0, source.size(0) - 1, SEQ_LEN):
            inputs, targets = chunk(source, start)
            logits, hidden = lm(inputs, hidden)
            total += len(inputs) * criterion(logits.view(-1, vocab_size), targets).item()  # want: TD203
    return total / (len(source) - 1)


def train_epoch(lm, source, optimizer, criterion, clip=0.25):
    lm.train()
    hidden = lm.init_hidden(source.size(1))
    running = 0.0
    for batch_no, start in enumerate(range(0, source.size(0) - 1, SEQ_LEN)):
        inputs, targets = chunk(source, start)
        hidden = tuple(h.detach() for h in hidden)
        lm.zero_grad()
        logits, hidden = lm(inputs, hidden)
        loss = criterion(logits.view(-1, logits.size(-1)), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), clip)
        optimizer.step()
        running += loss.item()  # want: TD201
    return running


@torch.inference_mode()
def perplexity(model, held_out, batch_size=16):
    losses = []
    for i in range(0, held_out.shape[0], batch_size):
        window = held_out[i:i + batch_size]
        logits = model(window[:, :-1])
        nll = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        losses.append(nll.item())  # want: TD203
    return math.exp(sum(losses) / len(losses))


def sample_words(lm, vocab, n_words, device, temperature=1.0):
    lm.eval()
    hidden = lm.init_hidden(1)
    token = torch.randint(len(vocab), (1, 1), dtype=torch.long, device=device)
    words = []
    with torch.no_grad():
        for _ in range(n_words):
            logits, hidden = lm(token, hidden)
            weights = logits.squeeze().div(temperature).exp()
            next_id = torch.multinomial(weights, 1)[0]
            token.fill_(next_id)
            words.append(vocab[next_id.item()])  # trap: generation needs each word on the host
    return " ".join(words)
