"""Real shape 6: tensors that stay on the host in a GPU run too: results after `.cpu()`, index
tensors made without a device, a Dataset reading its own index. Reading them costs no device
sync; a Python loop over their elements is the cost, reported once as the loop (TD301).
`# want: CODE` lines must be reported at low or above; `# trap` lines must not be."""
import torch
from torch.utils.data import DataLoader, Dataset


class Clips(Dataset):
    def __init__(self, frames, labels):
        self.frames = frames
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        if torch.is_tensor(index):
            index = index.item()  # trap: the sampler's index lives on the host
        label = self.labels[index]
        return self.frames[index], int(label)  # trap: a host tensor


def misclassified(model, loader, device, names):
    wrong = []
    model.eval()
    with torch.no_grad():
        for clips, labels in loader:
            predictions = model(clips.to(device, non_blocking=True)).argmax(dim=1)
            hits = (predictions == labels.to(device, non_blocking=True)).cpu()  # want: TD203
            for i in range(len(labels)):
                if not hits[i]:  # want: TD301
                    wrong.append(names[int(labels[i])])  # want: TD301 (host batches: no TD203)
    return wrong


def train(model, loader, optimizer, device, pool):
    for clips, labels in loader:
        clips, labels = clips.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        logits = model(clips)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        correct = (logits.argmax(1) == labels).cpu()  # want: TD201
        tally = 0
        for k in range(correct.shape[0]):
            tally += int(correct[k])  # want: TD301
        picks = torch.randint(0, len(pool), (4,))
        for j in picks:
            pool.append(pool[int(j)])  # trap: a host index tensor
        order = torch.randperm(8)
        first = order[0].item()  # trap: made without a device


def run(model, frames, labels, names):
    loader = DataLoader(Clips(frames, labels), batch_size=32, num_workers=4, pin_memory=True,
                        persistent_workers=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        train(model, loader, optimizer, "cuda", [])
    return misclassified(model, loader, "cuda", names)
