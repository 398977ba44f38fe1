"""Imitates a policy-gradient (REINFORCE) script in the shape of the PyTorch examples'
reinforcement-learning one: a small policy network, `select_action(state)` sampling
from a `Categorical`, the environment stepped with `action.item()`, log-probabilities
and rewards kept per episode, `finish_episode()` computing normalised discounted returns
and taking one optimizer step per episode, and a running reward printed every 10
episodes. The cart-pole environment is written here in plain Python (no gym).

Clean: the loss is computed in one vectorised expression and nothing is read that the
algorithm does not need.

Traps: `action.item()` is a read the environment requires: the next state depends on it,
so it cannot be deferred or batched within one episode (batching several environments is
the remedy, not removing the read); the per-environment-step policy calls (and the policy's
forward) are a loop only in the sense that an episode is sequential, not a vectorisable
Python loop.
"""
# torchdoctor-example: clean
import argparse
import math
import random

import torch
from torch import nn
from torch.distributions import Categorical
from torch.nn import functional as F


class CartPole:
    """Classic cart-pole dynamics (Euler steps of 20 ms); done when the pole falls."""

    gravity, cart_mass, pole_mass, half_length, force, dt = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.state = [0.0, 0.0, 0.0, 0.0]

    def reset(self) -> list[float]:
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        return list(self.state)

    def step(self, action: int) -> tuple[list[float], float, bool]:
        x, x_dot, theta, theta_dot = self.state
        force = self.force if action == 1 else -self.force
        total_mass = self.cart_mass + self.pole_mass
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + self.pole_mass * self.half_length * theta_dot ** 2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.half_length * (4.0 / 3.0 - self.pole_mass * cos ** 2 / total_mass))
        x_acc = temp - self.pole_mass * self.half_length * theta_acc * cos / total_mass
        x, x_dot = x + self.dt * x_dot, x_dot + self.dt * x_acc
        theta, theta_dot = theta + self.dt * theta_dot, theta_dot + self.dt * theta_acc
        self.state = [x, x_dot, theta, theta_dot]
        done = abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360
        return list(self.state), 1.0, done


class Policy(nn.Module):
    def __init__(self, hidden: int = 128):
        super().__init__()
        self.affine1 = nn.Linear(4, hidden)
        self.affine2 = nn.Linear(hidden, 2)
        self.saved_log_probs: list[torch.Tensor] = []
        self.rewards: list[float] = []

    def forward(self, x):
        # Called once per environment step on one state: the episode is sequential, so
        # these small ops cannot be batched within it (only across environments).
        return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=1)  # trap: TD301


def select_action(policy: Policy, state: list[float], device) -> torch.Tensor:
    state_t = torch.tensor(state, dtype=torch.float32, device=device).unsqueeze(0)
    # One environment step: each call depends on the state the previous action produced.
    probs = policy(state_t)  # trap: TD301
    dist = Categorical(probs)  # trap: TD301
    action = dist.sample()  # trap: TD301
    policy.saved_log_probs.append(dist.log_prob(action))
    return action


def finish_episode(policy: Policy, optimizer, gamma: float, device) -> None:
    returns, discounted = [], 0.0
    for r in reversed(policy.rewards):
        discounted = r + gamma * discounted
        returns.append(discounted)
    returns_t = torch.tensor(returns[::-1], device=device)
    returns_t = (returns_t - returns_t.mean()) / (returns_t.std() + 1e-8)
    loss = -(torch.cat(policy.saved_log_probs) * returns_t).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    policy.rewards.clear()
    policy.saved_log_probs.clear()


def main():
    parser = argparse.ArgumentParser(description="REINFORCE on a plain-Python cart-pole")
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=543)
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = CartPole(args.seed)
    policy = Policy().to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    running_reward = 10.0
    for episode in range(1, args.episodes + 1):
        state, ep_reward = env.reset(), 0.0
        for _ in range(args.max_steps):
            action = select_action(policy, state, device)  # trap: TD301
            # The environment is Python: it needs the action as a number before it can
            # produce the next state. A required read, once per environment step.
            state, reward, done = env.step(action.item())  # trap: TD201
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + 0.95 * running_reward
        finish_episode(policy, optimizer, args.gamma, device)
        if episode % args.log_interval == 0:
            print(f"Episode {episode}\tLast reward: {ep_reward:.0f}\tAverage reward: {running_reward:.2f}")


if __name__ == "__main__":
    main()
