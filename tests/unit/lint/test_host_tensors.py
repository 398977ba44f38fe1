"""Reads of tensors that stay on the host in a GPU run too are no device syncs: results after
`.cpu()`, tensors made without a device, a loader's batches before they are moved, a
Dataset's own index; a Python loop over their elements is reported as the loop (TD301)."""

from helpers.lint_files import found

STEP = """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=4, pin_memory=True, persistent_workers=True)
for x, y in loader:
    label = int(y[0])
    x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
    out = model(x)
    out.sum().backward()
    opt.step()
{body}
"""


def codes(tmp_path, body: str, **kw) -> list[tuple[str, int]]:
    return sorted(found(tmp_path, STEP.format(body="\n".join("    " + l for l in body.splitlines())), **kw))


def test_a_copy_made_with_cpu_is_read_without_a_sync_and_its_loop_is_the_finding(tmp_path):
    assert codes(tmp_path, "hits = (out.argmax(1) == y).cpu()\nfor i in range(hits.shape[0]):\n"
                           "    n = int(hits[i])") == [("TD201", 10), ("TD301", 12)]


def test_factories_without_a_device_and_the_elements_of_a_host_tensor(tmp_path):
    assert codes(tmp_path, "order = torch.randperm(8)\nfirst = order[0].item()\nfor j in torch.randint(0, 9, (4,)):\n"
                           "    k = int(j)\non_gpu = torch.randperm(8, device='cuda')\nlast = on_gpu[0].item()") == [
        ("TD201", 15)]


def test_a_batch_is_on_the_host_until_it_is_moved(tmp_path):
    assert codes(tmp_path, "z = int(y[0])") == [("TD201", 10)]  # line 5 reads the batch before the move


def test_a_custom_collate_function_may_put_batches_anywhere(tmp_path):
    code = STEP.format(body="").replace("persistent_workers=True)", "persistent_workers=True, collate_fn=to_gpu)")
    assert ("TD201", 5) in found(tmp_path, code)


def test_a_default_device_switch_removes_the_exemption(tmp_path):
    assert ("TD201", 11) in codes(tmp_path, "order = torch.randperm(8)\nfirst = order[0].item()\n"
                                             "torch.set_default_device('cuda')")


def test_a_dataset_reading_its_own_index_is_host_code(tmp_path):
    assert found(tmp_path, """
        import torch
        class Frames(torch.utils.data.Dataset):
            def __getitem__(self, index):
                if torch.is_tensor(index):
                    index = index.item()
                return self.frames[index]
            def forward(self, x):
                return x.item()
    """) == []


def test_a_name_read_after_it_was_rebound_to_a_float_is_no_tensor(tmp_path):
    # the sum of the micro-batch losses is read once with .item(); the prints after that format a float
    assert found(tmp_path, """
        import torch
        for step in range(100):
            lossf = 0.0
            for micro in range(4):
                loss = model(x) / 4
                lossf += loss.detach()
                loss.backward()
            lossf = lossf.item()
            opt.step()
            print(f"loss {lossf:.4f}")
            line = "%d %f" % (step, lossf)
            if lossf > 10:
                print("diverged")
    """) == [("TD201", 8)]


def test_a_name_rebound_to_a_float_only_in_a_branch_may_still_hold_a_tensor(tmp_path):
    assert ("TD201", 8) in found(tmp_path, """
        import torch
        for step in range(100):
            loss = model(x)
            loss.backward()
            opt.step()
            if fast:
                loss = loss.item()
            print(f"loss {loss}")
    """)


def test_numpy_straight_on_a_tensor_proves_it_is_on_the_cpu(tmp_path):
    # `.numpy()` raises on a CUDA tensor: code that calls it runs on the CPU (a plotting tutorial);
    # `.cpu().numpy()` is a read (of `.cpu()`), and so is `numpy(force=True)`
    assert found(tmp_path, """
        import torch
        for step in range(100):
            pred = model(x)
            loss = (pred - y).pow(2).mean()
            loss.backward()
            opt.step()
            a = pred.data.numpy()
            b = pred.detach().numpy()
            c = pred.detach().cpu().numpy()
            d = pred.numpy(force=True)
    """) == [("TD201", 9), ("TD201", 10)]


def test_a_tensor_made_without_a_device_that_meets_the_model_is_a_device_tensor(tmp_path):
    # issue 22 item 1: an input to the model, or a target in its loss, is on the GPU in a GPU run
    # wherever it was made; a tensor that stays on the host side of every op is a host tensor
    assert found(tmp_path, """
        import torch
        for step in range(100):
            tokens = torch.randint(0, 100, (8, 16))
            targets = torch.randint(0, 100, (8,))
            order = torch.randperm(8)
            out = model(tokens)
            loss = criterion(out, targets)
            loss.backward()
            opt.step()
            a = tokens.max().item()
            b = int(targets[0])
            c = order[0].item()
    """) == [("TD201", 10), ("TD201", 11)]
